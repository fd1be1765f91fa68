"""Stopping a run on the Runner: the Runner has no cancel, so its container is removed.

Runner 0.1.0 takes no name or label from a client: it names each run's container
``mlab-<job>-command-<hex>`` and writes the request's ``env`` as ``export`` lines into
the container's command (``bash -lc <step script>``). So every run carries a fresh
random tag in ``env`` (:data:`RUN_TAG_ENV`), and a stop removes (``docker rm -f``) the
``mlab-`` container whose command holds it, on the Docker engine this server reaches.
That engine runs the Runner's containers when the Runner is on this host (a loopback
``matrixlab_url``) or the lifecycle manages it; elsewhere a run cannot be stopped, and
plans and results say so.
"""

from __future__ import annotations

import importlib.util
import secrets
from collections.abc import Mapping
from urllib.parse import urlparse

from .config import is_loopback_host, lifecycle_enabled
from .docker_steps import docker_client

#: The variable each run's tag travels in (it ends up in the container's command line).
RUN_TAG_ENV = "GITPILOT_RUN_TAG"
#: How the Runner names a run's container.
RUNNER_CONTAINER_PREFIX = "mlab-"


def new_run_tag() -> str:
    """A tag no other run has: 24 hex characters."""
    return secrets.token_hex(12)


def stop_unavailable(url: str, environ: Mapping[str, str]) -> str | None:
    """Why Stop cannot remove a run's container on the Runner at ``url`` (None: it can)."""
    if importlib.util.find_spec("docker") is None:
        return "the Docker SDK for Python is not installed (pip install 'gitpilot-jupyter[docker]')"
    if lifecycle_enabled(environ) or is_loopback_host(urlparse(url).hostname):
        return None
    return "it is on another host and not managed here, so its Docker engine is out of reach"


def remove_tagged(tag: str) -> int:
    """Remove (``docker rm -f``) the Runner containers whose command holds ``tag`` (blocking).

    The number removed. Raises :class:`~gitpilot_jupyter.sandbox.errors.DockerUnavailable`
    when no engine answers.
    """
    from docker.errors import NotFound

    needle = f"{RUN_TAG_ENV}={tag}"
    client = docker_client()
    try:
        listed = client.api.containers(filters={"name": RUNNER_CONTAINER_PREFIX})
        removed = 0
        for container in listed:
            if needle not in str(container.get("Command") or ""):
                continue
            try:
                client.api.remove_container(container["Id"], force=True)
                removed += 1
            except NotFound:  # it ended (and --rm removed it) meanwhile
                pass
        return removed
    finally:
        client.close()
