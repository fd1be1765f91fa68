"""MatrixLab handlers: test a Runner connection, inspect and drive its lifecycle.

Thin calls to the service; the mutating calls are refused by the core unless
``GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1`` (403 ``lifecycle_disabled``).
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from .base import SandboxHandler, authorized_execute
from .stream import LineSink, StreamingHandler


class ConnectionTestHandler(SandboxHandler):
    """``POST /api/sandbox/matrixlab/test``, optionally with unsaved URL and token."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Reachability, latency, version, Docker and capabilities of a Runner, with a hint."""
        body = self.body("MatrixlabTestRequest")
        report = await self.call(
            self.service.matrixlab.test_connection(
                url=body.get("matrixlab_url"), token=body.get("matrixlab_token")
            )
        )
        self.write_json(report)


class LifecycleStatusHandler(SandboxHandler):
    """``GET /api/sandbox/matrixlab/lifecycle``: pure inspection, always safe."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Installed, running, Docker available, lifecycle enabled, images, url."""
        self.write_json(await self.call(self.service.matrixlab.lifecycle("status")))


class LifecycleActionHandler(StreamingHandler):
    """``POST /api/sandbox/matrixlab/{install,start,stop}``.

    With ``Accept: application/x-ndjson``, install streams the image pulls'
    progress as ``{"type": "progress", "image", "status", ...}`` lines.
    """

    @web.authenticated
    @authorized_execute
    async def post(self, action: str) -> None:
        """Run one lifecycle action; the answer lists each docker step."""
        self.body("EmptyRequest")
        service, user = self.service, self.username

        async def work(sink: LineSink | None) -> dict[str, Any]:
            async def progress(event: dict[str, Any]) -> None:
                assert sink is not None
                await sink({"type": "progress", **event})

            return await service.matrixlab.lifecycle(action, progress if sink else None, user=user)

        await self.answer(work)
