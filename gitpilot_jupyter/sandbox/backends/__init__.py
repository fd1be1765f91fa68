"""Sandbox backends: ``subprocess`` and ``off`` (local.py), ``matrixlab`` (matrixlab.py)."""
