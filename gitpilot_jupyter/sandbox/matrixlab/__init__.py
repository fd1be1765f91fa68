"""The ``matrixlab`` backend: Runner protocol, backend, probe, lifecycle via Docker, config."""
