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

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.local.bundled import BUNDLED_ENV
from gitpilot_jupyter.sandbox.local.pool import POOL_ENV
from tests.support.live_server import START_TIMEOUT_SEC, LiveServer, start_live_server

SHAPE_ENV = "GITPILOT_HOST_SHAPE"
POD_IMAGE_ENV = "GITPILOT_POD_IMAGE"
POD_IMAGE = "gitpilot-test/pod:latest"
INSIDE = Path(__file__).with_name("inside.py")
#: The pid in the name of the planted runtime file of "another server".
OTHER_SERVER_PID = 4242
#: Every attack runs on a cold start and on a warm pool slot (forced: no cold path).
POOL_MODE = {"cold": "off", "warm": "always"}


def nonce(kind: str) -> str:
    """A unique, recognisable string for what an attack looks for."""
    return f"gitpilot-{kind}-{secrets.token_hex(8)}"


@dataclass
class Shape:
    """A running Jupyter server in one host shape, and how to act as its user there."""

    name: str
    pool: str
    home: str
    runtime_dir: str
    server_pid: int
    port: int
    token: str
    env_secret: str
    ssh_secret: str
    other_token: str
    inside_python: str
    inside_script: str
    prefix: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    cli_argv: list[str] = field(default_factory=list)

    @property
    def ssh_key(self) -> str:
        """The planted private key."""
        return f"{self.home}/.ssh/id_ed25519"

    @property
    def other_server_file(self) -> str:
        """A planted runtime file of another server of the user's, with its token."""
        return f"{self.runtime_dir}/jpserver-{OTHER_SERVER_PID}.json"

    def plant(self) -> None:
        """Plant the secrets as the user: the ssh key, another server's token file."""
        self.inside("plant", self.ssh_key, self.ssh_secret)
        other = {"pid": OTHER_SERVER_PID, "port": 8889, "token": self.other_token}
        self.inside("plant", self.other_server_file, json.dumps(other))

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


#: The setup a wrapper made for the shape, passed on to the server: scripts/as_docker_user.py's
#: delegated cgroup, and .ci/run's bundled bubblewrap turned off (the Ubuntu 24.04 shape, where
#: only the namespace-free engine is left). The server gets no other GITPILOT_* variable (so
#: never GITPILOT_SANDBOX_ALLOW_UNCONTAINED, the opt-in to uncontained runs).
SHAPE_SETUP_ENV = ("GITPILOT_SANDBOX_CGROUP", BUNDLED_ENV)


def start_local(name: str, pool: str) -> tuple[Shape, LiveServer]:
    """A Jupyter server with the extension as this user, in a fresh home with secrets."""
    home = Path(tempfile.mkdtemp(prefix="gitpilot-shapes-home-", dir="/var/tmp"))
    token, env_secret, ssh_secret = secrets.token_hex(24), nonce("env"), nonce("ssh")
    env = {key: os.environ[key] for key in SHAPE_SETUP_ENV if key in os.environ}
    env.update(
        {
            "HOME": str(home),
            # As a hub starts a single-user server: its token and the hub's in its environment.
            "JUPYTER_TOKEN": token,
            "JUPYTERHUB_API_TOKEN": env_secret,
            POOL_ENV: POOL_MODE[pool],
        }
    )
    server = start_live_server(home, env=env, token=token)
    shape = Shape(
        name=name,
        pool=pool,
        home=str(home),
        runtime_dir=server.env["JUPYTER_RUNTIME_DIR"],
        server_pid=server.pid,
        port=int(server.url.rsplit(":", 1)[1]),
        token=token,
        env_secret=env_secret,
        ssh_secret=ssh_secret,
        other_token=secrets.token_hex(24),
        inside_python=sys.executable,
        inside_script=str(INSIDE),
        env={**server.env, "BASE_URL": server.url, "TOKEN": token},
        cli_argv=[sys.executable, "-m", "gitpilot_jupyter.wiring"],
    )
    shape.plant()
    return shape, server


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
        runtime_dir=f"{home}/.local/share/jupyter/runtime",
        server_pid=1,
        port=8888,
        token=token,
        env_secret=env_secret,
        ssh_secret=ssh_secret,
        other_token=secrets.token_hex(24),
        inside_python="/opt/venv/bin/python",
        inside_script=script,
        prefix=[
            *("docker", "exec", "-u", "1000:1000"),
            *("-e", "BASE_URL=http://127.0.0.1:8888", "-e", f"TOKEN={token}", name),
        ],
        cli_argv=["/opt/venv/bin/jupyter", "sandbox"],
    )
    shape.plant()
    # Docker's default seccomp profile is on the server (filter mode 2), as in a pod.
    status = shape.run(["cat", "/proc/1/status"]).stdout
    assert "\nSeccomp:\t2" in status, f"the pod's server runs without Docker's seccomp:\n{status}"

    deadline = time.monotonic() + START_TIMEOUT_SEC
    while time.monotonic() < deadline and pod_running(name):
        with contextlib.suppress(AssertionError):  # not listening yet
            if shape.api("GET", "api/sandbox/status")[0] == 200:
                return shape, name
        time.sleep(0.3)
    logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
    stop_pod(name)
    raise AssertionError(f"the pod's Jupyter server did not start:\n{logs.stderr[-3000:]}")


def pod_running(name: str) -> bool:
    """True while the container runs."""
    state = subprocess.run(
        ["docker", "inspect", "-f", "{{.State.Running}}", name],
        capture_output=True,
        text=True,
        check=False,
    )
    return state.stdout.strip() == "true"


def stop_pod(name: str) -> None:
    """Remove the container (with whatever an attack left running in it)."""
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def stop_local(shape: Shape, server: LiveServer) -> None:
    """Stop the server and remove its home."""
    server.stop()
    shutil.rmtree(shape.home, ignore_errors=True)
