"""A real JupyterHub on loopback with two real unix users, for the hub recipe's test.

The hub runs as root with ``LocalProcessSpawner`` (each user's single-user server is
a process of that user's uid) and the Python ``configurable-http-proxy`` (a pip
package: no Node.js). It is set up as ``docs/admin/jupyterhub.md`` tells an
administrator: a subordinate id range per user, a cgroup delegated to each user
(cgroup v1; ``scripts/as_docker_user.py`` does the same for its one user), and the
administrator's ``jupyter_server_config.py`` of the recipe, in a root-owned folder
every server reads (``JUPYTER_CONFIG_PATH``).

The checkout's venv may link into an interpreter under a folder other users cannot
enter (``/root`` is 0700, with pyenv in it): the hub starts in a private mount
namespace where those folders are opened up (``open_up`` of ``as_docker_user.py``),
which its servers inherit. Nothing on the host is changed for that.

    users = [make_user(name, base / f"home-{name}") for name in ("alice", "bob")]
    hub = start_hub(base / "hub", users)
    hub.spawn(["alice", "bob"])
    with hub.client_as(hub.user_token("alice")) as http:
        http.get("/user/alice/api/sandbox/status")
    hub.stop()
"""

from __future__ import annotations

import contextlib
import os
import pwd
import runpy
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .live_server import LiveServer, free_port

CHECKOUT = Path(__file__).resolve().parents[2]
AS_DOCKER_USER = CHECKOUT / "scripts" / "as_docker_user.py"
#: The administrator's server configuration of the recipe (docs/admin/jupyterhub.md shows it).
RECIPE = CHECKOUT / "docs" / "admin" / "hub-recipe" / "jupyter_server_config.py"
START_TIMEOUT_SEC = 60.0
NOLOGIN = "/usr/sbin/nologin"


def _script(name: str) -> Callable[..., Any]:
    """A function of ``scripts/as_docker_user.py`` (a script, not a package)."""
    function: Callable[..., Any] = runpy.run_path(str(AS_DOCKER_USER))[name]
    return function


def proxy_command() -> str | None:
    """The ``configurable-http-proxy`` beside this interpreter (the pip package's)."""
    beside = Path(sys.executable).parent / "configurable-http-proxy"
    return str(beside) if beside.exists() else shutil.which("configurable-http-proxy")


@dataclass
class HubUser:
    """A unix user of the test: name, ids, home, and the cgroup delegated to it."""

    name: str
    uid: int
    gid: int
    home: Path
    cgroup: str | None


def make_user(name: str, home: Path) -> HubUser:
    """The unix user ``name`` (made when missing, no login) with ``home`` as its home,
    a subordinate id range and, on cgroup v1, a cgroup of its own."""
    try:
        pwd.getpwnam(name)
        subprocess.run(["usermod", "--home", str(home), name], check=True)
    except KeyError:
        subprocess.run(
            [*("useradd", "--no-create-home", "--home-dir", str(home)), "--shell", NOLOGIN, name],
            check=True,
        )
    entry = pwd.getpwnam(name)
    home.mkdir(mode=0o755)
    os.chown(home, entry.pw_uid, entry.pw_gid)
    _script("add_subordinate_ranges")(entry)
    cgroup = _script("delegate_cgroup")(entry)
    return HubUser(name, entry.pw_uid, entry.pw_gid, home, cgroup)


def hub_config(
    folder: Path, users: Sequence[HubUser], admin_token: str, ports: dict[str, int]
) -> str:
    """The hub's ``jupyterhub_config.py``: loopback only, a dummy password login, local
    processes, the test's admin service, and the recipe's environment for every server."""
    proxy = proxy_command()
    cgroups = {user.name: user.cgroup for user in users if user.cgroup}
    return f"""
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {ports["proxy"]}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {ports["hub"]}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{ports["proxy_api"]}"
c.ConfigurableHTTPProxy.command = [{proxy!r}]
c.JupyterHub.db_url = "sqlite:///{folder}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/jupyterhub_cookie_secret"
c.JupyterHub.pid_file = "{folder}/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = {secrets.token_hex(12)!r}
c.Authenticator.allowed_users = {sorted(u.name for u in users)!r}
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [{sys.executable!r}, "-m", "jupyterhub.singleuser"]
c.Spawner.start_timeout = {int(START_TIMEOUT_SEC)}
# A spawn request answers at once (202): both users' servers start side by side.
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": 0}}
# A server asks on its terminal whether to stop at SIGINT and waits 5 s for an answer that
# never comes: SIGTERM after 1 s stops it at once.
c.LocalProcessSpawner.interrupt_timeout = 1
c.Spawner.http_timeout = {int(START_TIMEOUT_SEC)}
cgroups = {cgroups!r}
c.Spawner.environment = {{
    "JUPYTER_CONFIG_PATH": "{folder / "etc-jupyter"}",
    # A cold run per request: no warm pool started beside the test on a shared machine.
    "GITPILOT_SANDBOX_POOL": "off",
    "GITPILOT_SANDBOX_CGROUP": lambda spawner: cgroups.get(spawner.user.name, ""),
}}
c.JupyterHub.services = [{{"name": "test-admin", "api_token": {admin_token!r}}}]
c.JupyterHub.load_roles = [
    {{
        "name": "test-admin",
        "scopes": ["admin:users", "admin:servers", "tokens", "shares"],
        "services": ["test-admin"],
    }}
]
"""


@dataclass
class Hub(LiveServer):
    """A running hub: its public URL (the proxy), the admin service's token (``token``),
    its process, folder (``root_dir``) and log; ``stop`` stops its servers and proxy too."""

    hub_port: int = 0

    def client_as(self, token: str, *, timeout: float = 60.0) -> httpx.Client:
        """A client of the hub's proxy with ``token``."""
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"token {token}"}, timeout=timeout
        )

    def user_token(self, name: str) -> str:
        """A new API token of ``name`` (made by the admin service), for its own server."""
        with self.client() as http:
            answer = http.post(f"/hub/api/users/{name}/tokens", json={"note": "hub test"})
        answer.raise_for_status()
        token: str = answer.json()["token"]
        return token

    def spawn(self, names: Sequence[str]) -> None:
        """Start each user's single-user server and wait until every one is ready."""
        with self.client() as http:
            for name in names:
                answer = http.post(f"/hub/api/users/{name}/server")
                assert answer.status_code in (201, 202), answer.text
            deadline = time.monotonic() + START_TIMEOUT_SEC
            waiting = set(names)
            while waiting and time.monotonic() < deadline:
                for name in sorted(waiting):
                    servers = http.get(f"/hub/api/users/{name}").json()["servers"]
                    if servers.get("", {}).get("ready"):
                        waiting.discard(name)
                time.sleep(0.2)
        assert not waiting, f"servers of {sorted(waiting)} not ready:\n{self.log()[-4000:]}"


def start_hub(folder: Path, users: Sequence[HubUser], *, server_config: Path = RECIPE) -> Hub:
    """Start a hub for ``users`` whose data lives in ``folder``; return once it answers.

    ``server_config`` is copied into the root-owned ``folder/etc-jupyter`` as the
    administrator's ``jupyter_server_config.py`` that every user's server reads.
    """
    etc = folder / "etc-jupyter"
    etc.mkdir(parents=True)
    shutil.copy(server_config, etc / "jupyter_server_config.py")
    ports = {"proxy": free_port(), "proxy_api": free_port(), "hub": free_port()}
    admin_token = secrets.token_hex(24)
    config = folder / "jupyterhub_config.py"
    config.write_text(hub_config(folder, users, admin_token, ports), encoding="utf-8")
    needed = [CHECKOUT, Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve()]
    opener = (
        "import runpy, sys, os; "
        f"runpy.run_path({str(AS_DOCKER_USER)!r})['open_up']"
        f"([__import__('pathlib').Path(p) for p in {[str(p) for p in needed]!r}]); "
        "os.execv(sys.executable, [sys.executable, '-m', 'jupyterhub', '-f', sys.argv[1]])"
    )
    unshare = shutil.which("unshare") or "unshare"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITPILOT_", "JUPYTER"))}
    log_path = folder / "hub.log"
    private = [unshare, "--mount", "--propagation", "private", "--"]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [*private, sys.executable, "-c", opener, str(config)],
            cwd=folder,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    hub = Hub(
        url=f"http://127.0.0.1:{ports['proxy']}",
        token=admin_token,
        process=process,
        root_dir=folder,
        config_dir=etc,
        log_path=log_path,
        hub_port=ports["hub"],
    )
    deadline = time.monotonic() + START_TIMEOUT_SEC
    with hub.client(timeout=5) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the hub exited early:\n{hub.log()[-4000:]}")
            with contextlib.suppress(httpx.TransportError):
                if http.get("/hub/api/").status_code == 200:
                    return hub
            time.sleep(0.2)
    hub.stop()
    raise RuntimeError(f"the hub did not answer in time:\n{hub.log()[-4000:]}")
