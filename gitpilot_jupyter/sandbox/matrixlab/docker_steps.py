"""Docker SDK helpers for the lifecycle: a connected client, lookups, and the ``steps`` transcript.

``docker`` is imported lazily (the ``docker`` extra). Everything here blocks
except :meth:`Transcript.call`, which runs its call in a worker thread.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import DockerUnavailable
from ..records import LifecycleStep

PING_TIMEOUT_SEC = 5
CALL_TIMEOUT_SEC = 120
#: The label every container the lifecycle creates carries (and the only ones it replaces).
MANAGED_LABEL = ("org.gitpilot.managed-by", "gitpilot-jupyter")


class StepFailed(Exception):
    """A Docker call failed; its step is already in the transcript."""


class Transcript:
    """The ``steps`` of one answer; runs each blocking call in a thread."""

    def __init__(self) -> None:
        self.steps: list[LifecycleStep] = []

    def add(
        self, cmd: str, exit_code: int, stdout: str = "", stderr: str = "", ms: int = 0
    ) -> None:
        """Record one step."""
        self.steps.append(
            {
                "cmd": cmd,
                "exit_code": exit_code,
                "stdout": stdout,
                "stderr": stderr,
                "duration_ms": ms,
            }
        )

    async def call(
        self, cmd: str, fn: Callable[..., Any], *args: Any, describe: Callable[[Any], str] = str
    ) -> Any:
        """``fn(*args)`` in a thread, recorded as ``cmd``; :class:`StepFailed` when it raises."""
        started = time.monotonic()
        try:
            value = await asyncio.to_thread(fn, *args)
        except Exception as exc:
            self.add(cmd, 1, stderr=error_text(exc), ms=elapsed_ms(started))
            raise StepFailed(error_text(exc)) from exc
        self.add(cmd, 0, stdout=describe(value), ms=elapsed_ms(started))
        return value


def elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a monotonic time)."""
    return int((time.monotonic() - started) * 1000)


def error_text(exc: BaseException) -> str:
    """The Docker engine's explanation of an error, else its text."""
    explanation = getattr(exc, "explanation", None)
    return str(explanation or exc or type(exc).__name__)


def docker_client() -> Any:
    """A connected ``docker.DockerClient`` (blocking). Raises :class:`DockerUnavailable`."""
    try:
        from docker.client import DockerClient
    except ImportError:
        raise DockerUnavailable(
            "the Docker SDK for Python is not installed: pip install 'gitpilot-jupyter[docker]'"
        ) from None
    client = None
    try:
        # A short timeout to learn whether an engine answers, a long one for pulls and runs.
        client = DockerClient.from_env(timeout=PING_TIMEOUT_SEC)
        client.ping()
        client.api.timeout = CALL_TIMEOUT_SEC
    except Exception as exc:
        if client is not None:
            client.close()  # its connection pool holds the socket of the failed ping
        raise DockerUnavailable(
            f"no Docker engine answers ({error_text(exc)}); start Docker or set DOCKER_HOST"
        ) from None
    return client


def has_image(client: Any, image: str) -> bool:
    """Whether ``image`` is present on the engine."""
    from docker.errors import ImageNotFound

    try:
        client.images.get(image)
    except ImageNotFound:
        return False
    return True


def find_container(client: Any, name: str) -> Any:
    """The container named ``name``, or None."""
    from docker.errors import NotFound

    try:
        return client.containers.get(name)
    except NotFound:
        return None


def container_logs(client: Any, name: str) -> str:
    """The state and last log lines of a container, for a failed start."""
    container = find_container(client, name)
    if container is None:
        return f"no container named {name}"
    tail: bytes = container.logs(tail=30)
    return f"{name} is {container.status}; last log lines:\n" + tail.decode("utf-8", "replace")


def is_managed(container: Any) -> bool:
    """Whether the lifecycle created ``container`` (it carries :data:`MANAGED_LABEL`)."""
    key, value = MANAGED_LABEL
    return bool((container.labels or {}).get(key) == value)


def container_env(container: Any, name: str) -> str | None:
    """The value of the environment variable ``name`` the container was created with."""
    for item in (container.attrs.get("Config") or {}).get("Env") or []:
        key, sep, value = str(item).partition("=")
        if sep and key == name:
            return value
    return None


def published_port(container: Any, container_port: int) -> tuple[str, int] | None:
    """The host address and port ``container_port/tcp`` was published on, or None."""
    bindings = (container.attrs.get("HostConfig") or {}).get("PortBindings") or {}
    for binding in bindings.get(f"{container_port}/tcp") or []:
        port = str(binding.get("HostPort") or "")
        if port.isdigit():
            return str(binding.get("HostIp") or ""), int(port)
    return None


def stale_reasons(
    client: Any,
    container: Any,
    *,
    image: str,
    token_env: str,
    token: str,
    port: tuple[str, int],
    container_port: int,
    settings: Mapping[str, str] | None = None,
) -> list[str]:
    """Why ``container`` no longer matches what ``start`` would create (blocking).

    ``settings``: environment variables (not secret) it must have been created with.
    Never quotes a token: a start that reused a container with another token would
    leave the Runner open (no token) or refusing every run (another one).
    """
    reasons = []
    had = container_env(container, token_env) or ""
    if not hmac.compare_digest(had.encode(), token.encode()):
        reasons.append(
            "it runs without a bearer token (open to anyone who reaches it)"
            if not had
            else "its bearer token is not the saved matrixlab_token"
        )
    for name, value in (settings or {}).items():
        if container_env(container, name) != value:
            reasons.append(f"its {name} is not {value}")
    configured = (container.attrs.get("Config") or {}).get("Image")
    if configured != image:
        reasons.append(f"it runs the image {configured}, not {image}")
    elif has_image(client, image) and client.images.get(image).id != container.attrs.get("Image"):
        reasons.append(f"{image} was updated since it was created")
    published = published_port(container, container_port)
    if published is not None and published != port:
        reasons.append(f"it is published on {published[0]}:{published[1]}, not {port[0]}:{port[1]}")
    return reasons
