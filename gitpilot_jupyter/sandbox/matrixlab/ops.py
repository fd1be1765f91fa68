"""MatrixLab operations of the service: Test connection and the Runner lifecycle.

See ``docs/dev/contract.md`` §7-§8.

A part of :class:`~gitpilot_jupyter.sandbox.service.service.SandboxService` (held, not
inherited): it uses the service's settings, lifecycle config and audit hook, and
keeps the Docker and Runner code out of the module that plans and runs snippets.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..errors import InvalidRequest
from ..settings import validate_setting

if TYPE_CHECKING:
    from ..settings import SettingsStore
    from .config import LifecycleConfig

#: The lifecycle actions: ``status`` inspects; the others change Docker (behind the flag).
LIFECYCLE_ACTIONS = ("status", "install", "start", "stop")
#: Receives install's pull progress events: ``{"image", "status", "id"?, "current"?, "total"?}``.
ProgressCallback = Callable[[dict[str, Any]], Awaitable[None]]


def check_lifecycle_action(action: str) -> str:
    """``action`` when it is one of :data:`LIFECYCLE_ACTIONS`, else :class:`InvalidRequest`."""
    if action not in LIFECYCLE_ACTIONS:
        raise InvalidRequest(
            f"unknown lifecycle action {action!r}; expected one of {list(LIFECYCLE_ACTIONS)}"
        )
    return action


#: The service's audit hook: ``(event_name, data)``.
Emit = Callable[[str, dict[str, Any]], None]


class MatrixLabOperations:
    """Test connection and install / start / stop of the MatrixLab Runner."""

    def __init__(
        self, settings: SettingsStore, lifecycle_config: LifecycleConfig, emit: Emit
    ) -> None:
        self.settings = settings
        self.lifecycle_config = lifecycle_config
        self._emit = emit

    async def test_connection(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """Test connection to a Runner: the saved URL / token unless unsaved ones are given.

        A bad Runner does not raise: the report says what failed, with a hint.
        """
        from .probe import check_connection

        settings = self.settings.effective().settings
        target = str(validate_setting("matrixlab_url", url)) if url else None
        return await check_connection(
            settings.matrixlab_url,
            settings.matrixlab_token,
            url=target,
            token=token,
            image=settings.matrixlab_image,
        )

    def _lifecycle(self) -> Any:
        from .lifecycle import MatrixLabLifecycle

        settings = self.settings.effective().settings
        return MatrixLabLifecycle(
            self.lifecycle_config.with_env(self.settings.environ),
            url=settings.matrixlab_url,
            token=settings.matrixlab_token,
            environ=self.settings.environ,
            config_dir=self.settings.config_dir,
            save_token=lambda token: self.settings.update({"matrixlab_token": token}),
        )

    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None, *, user: str | None = None
    ) -> dict[str, Any]:
        """The one dispatch of the Runner lifecycle.

        ``status``: image installed, Runner running, Docker available, flag, images
        (read-only, not audited). ``install`` pulls the images not present yet
        (``progress`` gets pull events); ``start`` starts the Runner container,
        idempotent by name; ``stop`` stops it. The three need the lifecycle flag and
        each emits a ``lifecycle`` audit event.
        """
        check_lifecycle_action(action)
        lifecycle = self._lifecycle()
        if action == "status":
            status: dict[str, Any] = await lifecycle.status()
            return status
        started = time.monotonic()
        args = (progress,) if action == "install" else ()
        answer: dict[str, Any] = await getattr(lifecycle, action)(*args)
        duration_ms = int((time.monotonic() - started) * 1000)
        self._emit(
            "lifecycle",
            {"user": user, "action": action, "ok": answer["ok"], "duration_ms": duration_ms},
        )
        return answer
