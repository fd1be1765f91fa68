"""MatrixLab operations of the service: Test connection and the Runner lifecycle.

See ``docs/dev/contract.md`` §7-§8.

A mixin of :class:`~gitpilot_jupyter.sandbox.service.SandboxService`: it uses the
service's settings, lifecycle config and audit hook, and keeps the Docker and
Runner code out of the module that plans and runs snippets.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..settings import validate_setting

if TYPE_CHECKING:
    from ..settings import SettingsStore
    from .config import LifecycleConfig


class MatrixLabOperations:
    """Test connection and install / start / stop of the MatrixLab Runner."""

    settings: SettingsStore
    lifecycle_config: LifecycleConfig

    if TYPE_CHECKING:
        # Defined by SandboxService, the only class this mixin is part of.
        def _emit(self, event: str, data: dict[str, Any]) -> None: ...

    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """Test connection to a Runner: the saved URL / token unless unsaved ones are given.

        A bad Runner does not raise: the report says what failed, with a hint.
        """
        from .probe import check_connection

        settings = self.settings.effective().settings
        target = str(validate_setting("matrixlab_url", url)) if url else None
        return await check_connection(
            settings.matrixlab_url, settings.matrixlab_token, url=target, token=token
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
        )

    async def _lifecycle_action(self, action: str, user: str | None, *args: Any) -> dict[str, Any]:
        started = time.monotonic()
        answer: dict[str, Any] = await getattr(self._lifecycle(), action)(*args)
        duration_ms = int((time.monotonic() - started) * 1000)
        self._emit(
            "lifecycle",
            {"user": user, "action": action, "ok": answer["ok"], "duration_ms": duration_ms},
        )
        return answer

    async def lifecycle_status(self) -> dict[str, Any]:
        """Runner image installed, Runner running, Docker available, flag, images: read-only."""
        status: dict[str, Any] = await self._lifecycle().status()
        return status

    async def lifecycle_install(
        self, progress: Any = None, *, user: str | None = None
    ) -> dict[str, Any]:
        """Pull the images not present yet (``progress`` gets pull events). Needs the flag."""
        return await self._lifecycle_action("install", user, progress)

    async def lifecycle_start(self, *, user: str | None = None) -> dict[str, Any]:
        """Start the Runner container, idempotent by name. Needs the flag."""
        return await self._lifecycle_action("start", user)

    async def lifecycle_stop(self, *, user: str | None = None) -> dict[str, Any]:
        """Stop the Runner container. Needs the flag."""
        return await self._lifecycle_action("stop", user)
