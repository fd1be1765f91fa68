"""Configuration of the MatrixLab Runner lifecycle and its ``docker`` command lines.

The lifecycle is ``docs/dev/contract.md`` §8. Defaults < server config (a
:class:`LifecycleConfig` the server extension fills from traitlets) < environment
(``GITPILOT_MATRIXLAB_*``, read at every call).
The mutating calls need ``GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1``.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from ..errors import ContainmentUnavailable, InvalidSetting, LifecycleDisabled
from ..settings import env_flag, parse_flag
from .protocol import MAX_RUNNER_TIMEOUT_SEC

LIFECYCLE_FLAG = "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE"
RUNNER_IMAGE = "ruslanmv/matrixlab-runner:latest"
SANDBOX_IMAGES = (
    "ruslanmv/matrix-lab-sandbox-python:latest",
    "ruslanmv/matrix-lab-sandbox-node:latest",
    "ruslanmv/matrix-lab-sandbox-utils:latest",
)
#: env var -> LifecycleConfig field.
ENV_VARS = {
    "GITPILOT_MATRIXLAB_RUNNER_IMAGE": "runner_image",
    "GITPILOT_MATRIXLAB_SANDBOX_IMAGES": "sandbox_images",
    "GITPILOT_MATRIXLAB_CONTAINER": "container_name",
    "GITPILOT_MATRIXLAB_PORT": "host_port",
    "GITPILOT_MATRIXLAB_BIND": "bind_address",
    "GITPILOT_MATRIXLAB_JOBS_DIR": "jobs_dir",
    "GITPILOT_MATRIXLAB_DOCKER_SOCKET": "docker_socket",
    "GITPILOT_MATRIXLAB_RESTART": "restart_policy",
    "GITPILOT_MATRIXLAB_NETWORK_ISOLATED": "network_isolated",
    "GITPILOT_MATRIXLAB_MAX_WORKSPACE_MB": "max_workspace_mb",
}
TOKEN_ENV = "MATRIXLAB_BEARER_TOKEN"
#: Where the Runner looks for the Docker socket inside its container, whatever the host path.
RUNNER_DOCKER_SOCKET = "/var/run/docker.sock"
#: Job folders (one per run, never deleted by the Runner) older than this are pruned
#: after each run and by ``start`` and ``stop``: a run lasts at most the Runner's 900 s.
JOBS_MAX_AGE_SEC = MAX_RUNNER_TIMEOUT_SEC + 60
#: Where the Runner keeps its own copies of each run (``seeds/seed_*``: the snippet's
#: files and stdin; ``runs/<sandbox_id>/metadata.json``: its output; ``uploads/``):
#: its ``MATRIXLAB_STATE_DIR``, ``/app/runner_state`` in its image unless set. The
#: lifecycle sets it to :data:`STATE_SUBDIR` in the jobs folder, so the backend can
#: remove them after each run.
STATE_ENV = "MATRIXLAB_STATE_DIR"
STATE_SUBDIR = "runner-state"
#: The Runner refuses workspaces over 500 MiB; an administrator may set a smaller cap.
RUNNER_MAX_WORKSPACE_MB = 500


def lifecycle_enabled(environ: Mapping[str, str]) -> bool:
    """True when ``GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE`` is set to a true value."""
    return env_flag(environ, LIFECYCLE_FLAG, default=False)


#: What plans, results and status say where the lifecycle does not manage the Runner.
KEPT_NOTE = (
    "the Runner keeps copies of each run (the snippet's code, its stdin and its output) "
    "on its host: it is not managed here, so nothing removes them"
)


def kept_copies(managed: bool) -> str | None:
    """:data:`KEPT_NOTE` unless the lifecycle manages the Runner (``managed``: then the
    backend removes each run's copies, see :mod:`.jobs`)."""
    return None if managed else KEPT_NOTE


def url_port(url: str) -> int:
    """The port ``url`` names, or its scheme's (443 for https, else 80)."""
    parsed = urlparse(url)
    return parsed.port or (443 if parsed.scheme == "https" else 80)


def is_loopback_host(host: str | None) -> bool:
    """True for ``localhost`` and a loopback address (a URL's host name)."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_enabled(environ: Mapping[str, str]) -> None:
    """Raise :class:`LifecycleDisabled` (403) unless the flag is on; the message names it."""
    if not lifecycle_enabled(environ):
        raise LifecycleDisabled(
            "installing, starting and stopping the MatrixLab Runner is disabled; set "
            f"{LIFECYCLE_FLAG}=1 in the environment of the Jupyter server (or of the CLI) "
            "to enable it"
        )


@dataclass(frozen=True)
class LifecycleConfig:
    """The Runner's host as the administrator describes it: where and how its container
    runs, what it is known to isolate, and how much a run may send. Empty / None fields
    take their defaults."""

    runner_image: str = RUNNER_IMAGE
    sandbox_images: tuple[str, ...] = SANDBOX_IMAGES
    container_name: str = "gitpilot-matrixlab"
    #: Host port published for the Runner's 8000; None = the port of ``matrixlab_url``.
    host_port: int | None = None
    container_port: int = 8000
    #: Host address the port is published on (loopback: the Runner drives Docker).
    bind_address: str = "127.0.0.1"
    #: Jobs folder mounted at the same path inside and out; "" = ``<config dir>/matrixlab-jobs``.
    jobs_dir: str = ""
    docker_socket: str = "/var/run/docker.sock"
    restart_policy: str = "unless-stopped"
    #: Seconds ``start`` waits for ``/health`` to answer.
    start_wait_sec: float = 30.0
    #: The administrator knows the Runner gives a network-on run a network of its own
    #: (egress only: not the host's addresses, the Docker bridge or the Runner's API).
    #: Off: network-on runs are refused on this backend.
    network_isolated: bool = False
    #: The largest workspace (the file's folder of a file run) sent to the Runner, in MiB.
    max_workspace_mb: int = RUNNER_MAX_WORKSPACE_MB

    def with_env(self, environ: Mapping[str, str]) -> LifecycleConfig:
        """This config with the non-empty ``GITPILOT_MATRIXLAB_*`` variables applied."""
        changes: dict[str, object] = {}
        for var, key in ENV_VARS.items():
            raw = environ.get(var, "").strip()
            if not raw:
                continue
            if key == "sandbox_images":
                changes[key] = tuple(i.strip() for i in raw.split(",") if i.strip())
            elif key == "host_port":
                if not raw.isdigit() or not 1 <= int(raw) <= 65535:
                    raise InvalidSetting(f"{var} must be a port number, got {raw!r}")
                changes[key] = int(raw)
            elif key == "network_isolated":
                flag = parse_flag(raw)
                if flag is None:
                    raise InvalidSetting(f"{var} must be 1 or 0, got {raw!r}")
                changes[key] = flag
            elif key == "max_workspace_mb":
                changes[key] = check_workspace_mb(raw, var)
            else:
                changes[key] = raw
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def port_for(self, url: str) -> int:
        """The host port: configured, else the port of ``url`` (default 80 / 443)."""
        return self.host_port or url_port(url)

    def manages(self, url: str, environ: Mapping[str, str]) -> bool:
        """True when the lifecycle is on and ``url`` is where its container's Runner
        answers (this host, the published port); a Runner elsewhere is not its own."""
        if not lifecycle_enabled(environ):
            return False
        host = urlparse(url).hostname
        here = is_loopback_host(host) or host == self.bind_address
        return here and url_port(url) == self.port_for(url)

    def published_url(self, url: str) -> str:
        """Where the container's Runner answers on this host: the bind address and host port."""
        host = self.bind_address
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port_for(url)}"

    def jobs_path(self, config_dir: Path) -> str:
        """The absolute jobs folder."""
        return str(Path(self.jobs_dir or config_dir / "matrixlab-jobs").expanduser().resolve())

    def images(self) -> list[tuple[str, str]]:
        """``(role, image)`` for the runner and each sandbox image, without repeats."""
        seen: list[tuple[str, str]] = [("runner", self.runner_image)]
        for image in self.sandbox_images:
            if image not in (i for _, i in seen):
                seen.append(("sandbox", image))
        return seen


def check_workspace_mb(value: object, name: str = "matrixlab_max_workspace_mb") -> int:
    """A workspace cap in MiB: 1 up to the Runner's own 500; else :class:`InvalidSetting`."""
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= RUNNER_MAX_WORKSPACE_MB:
        raise InvalidSetting(
            f"{name} must be a number of MiB from 1 to {RUNNER_MAX_WORKSPACE_MB} "
            f"(the Runner's own cap), got {text!r}"
        )
    return int(text)


def network_refusal(
    url: str, *, isolated: bool, allow_network: bool
) -> ContainmentUnavailable | None:
    """Why a network-on run is refused on the Runner at ``url`` (None: it is not).

    The Runner's ``allow_network`` puts the container on Docker's default bridge: it
    reaches the host's addresses, the other containers and the Runner's own API (which
    starts containers). Only an administrator who isolated that network says otherwise.
    """
    if not allow_network or isolated:
        return None
    return ContainmentUnavailable(
        f"refused: with network on, a run on the MatrixLab Runner at {url} shares Docker's "
        "bridge: it reaches the Runner host's addresses, its other containers and the "
        "Runner's own API, not only the internet (the subprocess backend gives network-on "
        "runs egress only). To fix: run with network off, use the subprocess backend, or, "
        "once the Runner's containers get a network of their own, an administrator sets "
        "c.SandboxApp.matrixlab_network_isolated = True "
        "(GITPILOT_MATRIXLAB_NETWORK_ISOLATED=1)",
        code="network_unavailable",
    )


def state_path(jobs: str) -> str:
    """The Runner's state folder (:data:`STATE_ENV`) the lifecycle gives it in ``jobs``."""
    return os.path.join(jobs, STATE_SUBDIR)


def runner_environment(jobs: str, token: str) -> dict[str, str]:
    """The Runner container's environment: jobs and state folders in ``jobs`` (mounted
    at the same path), and the token when there is one."""
    environment = {
        "MATRIXLAB_LOCAL_JOBS_DIR": jobs,
        "MATRIXLAB_HOST_JOBS_DIR": jobs,
        STATE_ENV: state_path(jobs),
    }
    if token:
        environment[TOKEN_ENV] = token
    return environment


def run_command_line(config: LifecycleConfig, url: str, jobs: str, with_token: bool) -> str:
    """The ``docker run`` line equivalent to ``start`` (a token shows as ``***``)."""
    args = ["docker", "run", "-d", "--name", config.container_name]
    args += ["--restart", config.restart_policy]
    args += ["-p", f"{config.bind_address}:{config.port_for(url)}:{config.container_port}"]
    args += ["-v", f"{config.docker_socket}:{RUNNER_DOCKER_SOCKET}", "-v", f"{jobs}:{jobs}"]
    for name, value in runner_environment(jobs, "***" if with_token else "").items():
        args += ["-e", f"{name}={value}"]
    return shlex.join([*args, config.runner_image])


def instructions(config: LifecycleConfig, url: str, jobs: str, with_token: bool) -> list[str]:
    """The commands that install, start and stop the Runner by hand."""
    pulls = [f"docker pull {shlex.quote(image)}" for _, image in config.images()]
    return [
        *pulls,
        f"mkdir -p {shlex.quote(jobs)}",
        run_command_line(config, url, jobs, with_token),
        f"docker stop {shlex.quote(config.container_name)}",
    ]
