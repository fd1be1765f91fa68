"""A real ``jupyter server`` subprocess with the sandbox extension, for suites and benchmarks.

Unlike pytest-jupyter's in-process server, this one runs in its own process:
its event loop, memory, file descriptors, child processes and log are its own,
so a test can measure them and a synchronous client (schemathesis, httpx) can
call it from any thread.

    server = start_live_server(tmp_path, env={"GITPILOT_MATRIXLAB_TOKEN": "..."})
    with server.client() as http:
        http.get("/api/sandbox/status")
    server.stop()
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

START_TIMEOUT_SEC = 60.0


def free_port() -> int:
    """A loopback TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LiveServer:
    """A running server: its URL, token, process, folders and log file."""

    url: str
    token: str
    process: subprocess.Popen[bytes]
    root_dir: Path
    config_dir: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.process.pid

    def client(self, *, authenticated: bool = True, timeout: float = 60.0) -> httpx.Client:
        """A synchronous client on the server's base URL (token header unless told not to)."""
        headers = {"Authorization": f"token {self.token}"} if authenticated else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def async_client(
        self, *, timeout: float = 60.0, max_connections: int = 256
    ) -> httpx.AsyncClient:
        """An async client on the server's base URL with the token header."""
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"token {self.token}"},
            timeout=timeout,
            limits=httpx.Limits(max_connections=max_connections),
        )

    def log(self) -> str:
        """Everything the server has logged so far."""
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL); idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


def start_live_server(
    workdir: Path,
    *,
    env: Mapping[str, str] | None = None,
    args: Sequence[str] = (),
    token: str | None = None,
) -> LiveServer:
    """Start ``jupyter server`` rooted in ``workdir/root``; return once it answers.

    Jupyter's config, data and runtime folders and ``GITPILOT_CONFIG_DIR`` all live
    under ``workdir``, so nothing of the user's setup leaks in or out.
    """
    token = token or secrets.token_hex(24)
    root = workdir / "root"
    config_dir = workdir / "gitpilot-config"
    for folder in (root, config_dir, workdir / "jupyter-config", workdir / "jupyter-data"):
        folder.mkdir(parents=True, exist_ok=True)
    child_env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GITPILOT_", "JUPYTER_"))
    }
    child_env.update(
        {
            "GITPILOT_CONFIG_DIR": str(config_dir),
            "JUPYTER_CONFIG_DIR": str(workdir / "jupyter-config"),
            "JUPYTER_DATA_DIR": str(workdir / "jupyter-data"),
            "JUPYTER_RUNTIME_DIR": str(workdir / "jupyter-runtime"),
            "JUPYTER_PLATFORM_DIRS": "1",
            # No warm pool unless asked for (env or --SandboxApp.pool), as in-process.
            "GITPILOT_SANDBOX_POOL": "off",
        }
    )
    child_env.update(env or {})
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "jupyter_server",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.ip=127.0.0.1",
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
        "--ServerApp.jpserver_extensions={'gitpilot_jupyter': True}",
        "--ServerApp.terminals_enabled=False",
        *(["--allow-root"] if os.geteuid() == 0 else []),
        *args,
    ]
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            argv, cwd=root, env=child_env, stdout=log, stderr=subprocess.STDOUT
        )
    server = LiveServer(
        url=f"http://127.0.0.1:{port}",
        token=token,
        process=process,
        root_dir=root,
        config_dir=config_dir,
        log_path=log_path,
        env=child_env,
    )
    _wait_until_ready(server)
    return server


def _wait_until_ready(server: LiveServer) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SEC
    with server.client(timeout=5) as http:
        while time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise RuntimeError(f"jupyter server exited early:\n{server.log()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if http.get("/api/sandbox/status").status_code == 200:
                    return
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"jupyter server did not answer in time:\n{server.log()[-3000:]}")
