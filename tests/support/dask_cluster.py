"""A Dask cluster as separate machines would have it: a scheduler and workers, each a process.

They speak Dask's TLS with mutual authentication, as a batch requires: one throw-away
certificate (``Security.temporary()``) is the authority and every side's certificate.
Used by the batch tests and the batch benchmark.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.batch import ClusterAccess

# The magic tests: an IPython shell, and a real ipykernel.
from tests.kernel.conftest import shell, venv_kernelspec  # noqa: F401
from tests.kernel.test_in_kernel import kernel  # noqa: F401

# The REST tests use the server tests' fixtures: a real server held to rest-api.yml.
from tests.server.conftest import api, jp_server_config, openapi  # noqa: F401

DASK = str(Path(sys.executable).parent / "dask")
START_TIMEOUT_SEC = 60


@dataclass
class DaskProcesses:
    """The scheduler's address and the worker processes by name."""

    folder: Path
    address: str = ""
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from distributed import Security

        pem = Security.temporary()
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "ca.pem").write_text(pem.tls_ca_file)
        (self.folder / "cert.pem").write_text(pem.tls_client_cert)
        (self.folder / "key.pem").write_text(pem.tls_client_key)

    @property
    def tls_args(self) -> list[str]:
        """The certificate options of ``dask scheduler`` and ``dask worker``."""
        f = self.folder
        return ["--tls-ca-file", f"{f}/ca.pem", "--tls-cert", f"{f}/cert.pem",
                "--tls-key", f"{f}/key.pem"]  # fmt: skip

    @property
    def access(self) -> ClusterAccess:
        """How a batch reaches this cluster (its address and a certificate it accepts)."""
        f = self.folder
        return ClusterAccess(self.address, f"{f}/ca.pem", f"{f}/cert.pem", f"{f}/key.pem")

    def client(self) -> Any:
        """A synchronous ``distributed.Client`` of this cluster (use it as a context)."""
        from distributed import Client

        return Client(self.address, timeout=10, security=self.access.security())

    def start(
        self, name: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        # The child gets its own copy of the log's descriptor; ours is closed at once.
        with (self.folder / f"{name}.log").open("wb") as log:
            proc = subprocess.Popen(
                [DASK, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        self.procs[name] = proc
        return proc

    def start_worker(self, name: str, threads: int = 2, env: dict[str, str] | None = None) -> None:
        """A ``dask worker`` on loopback; ``env`` is added to its environment (its settings)."""
        self.start(
            name, "worker", self.address, "--name", name, "--nthreads", str(threads),
            "--no-nanny", "--no-dashboard", "--host", "127.0.0.1", *self.tls_args, env=env,
        )  # fmt: skip

    def workers(self) -> dict[str, str]:
        """``{name: address}`` of the workers the scheduler knows now."""
        with self.client() as client:
            found = client.scheduler_info(n_workers=-1)["workers"]
        return {w["name"]: addr for addr, w in found.items()}

    def wait_for_workers(self, n: int) -> dict[str, str]:
        deadline = time.monotonic() + START_TIMEOUT_SEC
        while time.monotonic() < deadline:
            found = self.workers()
            if len(found) >= n:
                return found
            time.sleep(0.2)
        raise AssertionError(f"{n} dask workers did not register; see {self.folder}/*.log")

    def kill(self, name: str) -> None:
        """SIGKILL a process as a machine dying would (no goodbye to the scheduler)."""
        proc = self.procs[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop(self) -> None:
        """Kill every process this fixture started (they hold nothing worth a clean exit)."""
        for name in self.procs:
            self.kill(name)


@contextlib.contextmanager
def dask_processes(
    folder: Path, workers: int = 2, threads: int = 2, env: dict[str, str] | None = None
) -> Iterator[DaskProcesses]:
    """``dask scheduler`` and ``workers`` ``dask worker`` processes (w1, w2...) on loopback,
    over mutual TLS; ``env`` is added to the workers' environment."""
    folder.mkdir(parents=True, exist_ok=True)
    cluster = DaskProcesses(folder)
    file = folder / "scheduler.json"
    cluster.start(
        "scheduler", "scheduler", "--host", "127.0.0.1", "--port", "0", "--protocol", "tls",
        "--no-dashboard", "--scheduler-file", str(file), *cluster.tls_args,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_SEC
        while not file.exists() or not file.read_text().strip():
            if time.monotonic() > deadline:
                raise AssertionError(f"the dask scheduler did not start; see {folder}")
            time.sleep(0.1)
        time.sleep(0.1)
        cluster.address = json.loads(file.read_text())["address"]
        for n in range(1, workers + 1):
            cluster.start_worker(f"w{n}", threads, env)
        cluster.wait_for_workers(workers)
        yield cluster
    finally:
        cluster.stop()
