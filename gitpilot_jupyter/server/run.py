"""``POST /api/sandbox/run``: one JSON envelope, or an NDJSON stream of output then the envelope."""

from __future__ import annotations

import json
from asyncio import Future
from typing import Any

from tornado import web

from .base import SandboxHandler, authorized_execute, error_body

NDJSON = "application/x-ndjson"


class RunHandler(SandboxHandler):
    """Run an approved snippet; stream its output when the client accepts NDJSON."""

    _streaming = False
    _client_gone = False

    def wants_stream(self) -> bool:
        """True when the ``Accept`` header asks for NDJSON."""
        return NDJSON in self.request.headers.get("Accept", "")

    def on_connection_close(self) -> None:
        """The client went away: the run goes on to its end (and its audit event), unseen."""
        self._client_gone = True
        super().on_connection_close()

    def _send_line(self, line: dict[str, Any]) -> None:
        """Write one JSON line and flush it so the client sees it now.

        The flush is not awaited: a slow client must never hold up the reading of
        the snippet's pipes (the output cap already bounds what can pile up here).
        """
        if self._client_gone:
            return
        if not self._streaming:
            self._streaming = True
            self.set_header("Content-Type", NDJSON)
            # Reverse proxies must pass each line on at once instead of buffering.
            self.set_header("X-Accel-Buffering", "no")
            self.set_header("Cache-Control", "no-cache")
        self.write(json.dumps(line) + "\n")
        self.flush().add_done_callback(self._flushed)

    def _flushed(self, future: Future[None]) -> None:
        if future.exception() is not None:
            self._client_gone = True

    async def _on_output(self, stream: str, text: str) -> None:
        self._send_line({"type": stream, "data": text})

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
            self._send_line({"type": "error", **error_body(exc.status_code, exc)})
        else:
            self._send_line({"type": "result", **result.to_dict()})
        if not self._client_gone:
            self.finish(set_content_type=NDJSON)
