"""``POST /api/sandbox/run``: one JSON envelope, or an NDJSON stream of output then the envelope."""

from __future__ import annotations

from typing import Any

from tornado import web

from .base import authorized_execute
from .stream import LineSink, StreamingHandler


class RunHandler(StreamingHandler):
    """Run an approved snippet; stream its output when the client accepts NDJSON."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Check the body, then let the service check approval, language, code and policy."""
        body = self.body("RunRequest")

        async def work(sink: LineSink | None) -> dict[str, Any]:
            async def on_output(stream: str, text: str) -> None:
                assert sink is not None
                await sink({"type": stream, "data": text})

            result = await self.service.run(
                **body, user=self.username, on_output=on_output if sink else None
            )
            return result.to_dict()

        await self.answer(work)
