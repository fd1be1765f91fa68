"""The host shapes the attack suite runs in, each with a real Jupyter server and planted secrets.

``GITPILOT_HOST_SHAPE`` names the shape (how the suite was started):

* ``local`` (the default): this process's user on this host, as started (root, or the
  docker-group user under ``scripts/as_docker_user.py``);
* ``pip-only``: the same with no bubblewrap (``scripts/as_pip_only.py`` sets it);
* ``pod``: a container of the pod image (``scripts/build-pod-image.sh``) run with
  Docker's defaults as uid 1000, the server inside it, driven by ``docker exec``.

Every shape is driven the same way: :mod:`tests.hostshapes.inside` runs as the user
inside it (REST calls to the server on its loopback, planting, the process list).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.local.pool import POOL_ENV

SHAPE_ENV = "GITPILOT_HOST_SHAPE"
POD_IMAGE_ENV = "GITPILOT_POD_IMAGE"
POD_IMAGE = "gitpilot-test/pod:latest"
#: The administrator's opt-in to uncontained runs: never set for the attacks.
ALLOW_UNCONTAINED_ENV = "GITPILOT_SANDBOX_ALLOW_UNCONTAINED"
INSIDE = Path(__file__).with_name("inside.py")
#: Every attack runs on a cold start and on a warm pool slot (forced: no cold path).
POOL_MODE = {"cold": "off", "warm": "always"}
SERVER_START_TIMEOUT = 60.0


def nonce(kind: str) -> str:
    """A unique, recognisable string for what an attack looks for."""
    return f"gitpilot-{kind}-{secrets.token_hex(8)}"


@dataclass
class Shape:
    """A running Jupyter server in one host shape, and how to act as its user there."""

    name: str
    pool: str
    home: str
    server_pid: int
    port: int
    token: str
    env_secret: str
    ssh_secret: str
    inside_python: str
    inside_script: str
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cli_argv: list[str] = field(default_factory=list)

    @property
    def runtime_dir(self) -> str:
        """The server's Jupyter runtime dir (its ``jpserver-PID.json`` holds the token)."""
        return f"{self.home}/.local/share/jupyter/runtime"

    @property
    def ssh_key(self) -> str:
        """The planted private key."""
        return f"{self.home}/.ssh/id_ed25519"

    def run(self, argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` as the user inside the shape."""
        return subprocess.run(
            [*self.prefix, *argv],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def inside(self, *args: str) -> Any:
        """Run one :mod:`inside` command; its JSON answer."""
        done = self.run([self.inside_python, self.inside_script, *args])
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else None

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        """Start one long-running :mod:`inside` command with pipes."""
        prefix = [*self.prefix[:2], "-i", *self.prefix[2:]] if self.prefix else []
        return subprocess.Popen(
            [*prefix, self.inside_python, self.inside_script, *args],
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """A REST call to the server from inside the shape, with its token."""
        args = ["api", method, path] + ([json.dumps(body)] if body is not None else [])
        answer = self.inside(*args)
        return int(answer["code"]), answer["body"]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``jupyter sandbox ARGS`` as the user inside the shape."""
        return self.run([*self.cli_argv, *args])


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_local(name: str, pool: str) -> tuple[Shape, subprocess.Popen[bytes], Path]:
    """A Jupyter server with the extension as this user, in a fresh home with secrets."""
    home = Path(tempfile.mkdtemp(prefix="gitpilot-shapes-home-", dir="/var/tmp"))
    token, env_secret, ssh_secret = secrets.token_hex(24), nonce("env"), nonce("ssh")
    config = home / ".jupyter"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"gitpilot_jupyter": True}}})
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("JUPYTER", "XDG_")) and key != ALLOW_UNCONTAINED_ENV
    }
    env.update(
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(config),
        JUPYTER_TOKEN=token,
        JUPYTERHUB_API_TOKEN=env_secret,
    )
    env[POOL_ENV] = POOL_MODE[pool]
    port = free_port()
    argv = [sys.executable, "-m", "jupyter_server", f"--port={port}", "--ip=127.0.0.1"]
    argv += ["--port-retries=0", "--no-browser"]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    with (home / "server.log").open("wb") as log:
        server = subprocess.Popen(argv, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT)
    shape = Shape(
        name=name,
        pool=pool,
        home=str(home),
        server_pid=server.pid,
        port=port,
        token=token,
        env_secret=env_secret,
        ssh_secret=ssh_secret,
        inside_python=sys.executable,
        inside_script=str(INSIDE),
        env={**env, "BASE_URL": f"http://127.0.0.1:{port}", "TOKEN": token},
        cli_argv=[sys.executable, "-m", "gitpilot_jupyter.wiring"],
    )
    shape.inside("plant", shape.ssh_key, ssh_secret)
    wait_ready(shape, lambda: server.poll() is None, home / "server.log")
    return shape, server, home


def start_pod(image: str, pool: str) -> tuple[Shape, str]:
    """A container of the pod image with its server up, secrets planted; its name."""
    name = nonce("pod")
    token, env_secret, ssh_secret = secrets.token_hex(24), nonce("env"), nonce("ssh")
    # Docker's defaults: its seccomp and AppArmor profiles, no --privileged, no capability
    # added; no network but the container's own loopback; nothing published.
    started = subprocess.run(
        [
            *("docker", "run", "-d", "--rm", "--name", name, "--network", "none"),
            *("--user", "1000:1000", "-e", f"JUPYTER_TOKEN={token}"),
            *("-e", f"JUPYTERHUB_API_TOKEN={env_secret}", "-e", f"{POOL_ENV}={POOL_MODE[pool]}"),
            image,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    script = "/opt/gitpilot-shapes-inside.py"
    subprocess.run(["docker", "cp", str(INSIDE), f"{name}:{script}"], check=True)
    subprocess.run(["docker", "exec", "-u", "0", name, "chmod", "0644", script], check=True)
    home = "/home/jovyan"
    shape = Shape(
        name="pod",
        pool=pool,
        home=home,
        server_pid=1,
        port=8888,
        token=token,
        env_secret=env_secret,
        ssh_secret=ssh_secret,
        inside_python="/opt/venv/bin/python",
        inside_script=script,
        prefix=[
            *("docker", "exec", "-u", "1000:1000"),
            *("-e", "BASE_URL=http://127.0.0.1:8888", "-e", f"TOKEN={token}", name),
        ],
        cli_argv=["/opt/venv/bin/jupyter", "sandbox"],
    )
    shape.inside("plant", shape.ssh_key, ssh_secret)
    # Docker's default seccomp profile is on the server (filter mode 2), as in a pod.
    status = shape.run(["cat", "/proc/1/status"]).stdout
    assert "\nSeccomp:\t2" in status, f"the pod's server runs without Docker's seccomp:\n{status}"

    def alive() -> bool:
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", name],
            capture_output=True,
            text=True,
            check=False,
        )
        return state.stdout.strip() == "true"

    wait_ready(shape, alive, None, logs=["docker", "logs", name])
    return shape, name


def wait_ready(shape: Shape, alive: Any, log: Path | None, logs: list[str] | None = None) -> None:
    """Until the server answers its sandbox status; fails with its log when it died."""
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while time.monotonic() < deadline:
        if not alive():
            break
        try:
            code, _ = shape.api("GET", "api/sandbox/status")
        except AssertionError:
            code = 0
        if code == 200:
            return
        time.sleep(0.3)
    text = log.read_text() if log is not None and log.exists() else ""
    if logs is not None:
        text = subprocess.run(logs, capture_output=True, text=True, check=False).stderr
    raise AssertionError(f"the Jupyter server in shape {shape.name} did not start:\n{text[-3000:]}")


def stop_pod(name: str) -> None:
    """Remove the container (with whatever an attack left running in it)."""
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def stop_local(server: subprocess.Popen[bytes], home: Path) -> None:
    """Stop the server and remove its home."""
    server.terminate()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    shutil.rmtree(home, ignore_errors=True)
