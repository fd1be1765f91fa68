"""``POST /api/sandbox/run``: one JSON envelope, or an NDJSON stream of output then the envelope."""

from __future__ import annotations

import json
from typing import Any

from tornado import web
from tornado.iostream import StreamClosedError

from .base import SandboxHandler, authorized_execute, error_body

NDJSON = "application/x-ndjson"


class RunHandler(SandboxHandler):
    """Run an approved snippet; stream its output when the client accepts NDJSON."""

    _streaming = False
    _client_gone = False

    def wants_stream(self) -> bool:
        """True when the ``Accept`` header asks for NDJSON."""
        return NDJSON in self.request.headers.get("Accept", "")

    async def _send_line(self, line: dict[str, Any]) -> None:
        """Write one JSON line and flush it so the client sees it now."""
        if self._client_gone:
            return
        if not self._streaming:
            self._streaming = True
            self.set_header("Content-Type", NDJSON)
            # Reverse proxies must pass each line on at once instead of buffering.
            self.set_header("X-Accel-Buffering", "no")
            self.set_header("Cache-Control", "no-cache")
        self.write(json.dumps(line) + "\n")
        try:
            await self.flush()
        except StreamClosedError:
            # The run goes on to its end (and its audit event); only the stream stops.
            self._client_gone = True

    async def _on_output(self, stream: str, text: str) -> None:
        await self._send_line({"type": stream, "data": text})

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Check the body, then let the service check approval, language, code and policy."""
        body = self.body("RunRequest")
        stream = self.wants_stream()
        run = self.service.run(
            **body, user=self.username, on_output=self._on_output if stream else None
        )
        if not stream:
            result = await self.call(run)
            self.write_json(result.to_dict())
            return
        try:
            result = await self.call(run)
        except web.HTTPError as exc:
            if not self._streaming:
                raise  # nothing sent yet: a normal JSON error answer
            await self._send_line({"type": "error", **error_body(exc.status_code, exc)})
        else:
            await self._send_line({"type": "result", **result.to_dict()})
        self.finish(set_content_type=NDJSON)
