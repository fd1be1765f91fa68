"""Answers as NDJSON streams: lines as the work produces them, then its result.

A client that sends ``Accept: application/x-ndjson`` gets one JSON object per
line, flushed at once, and last ``{"type": "result", ...}``. An error found
before the first line is an ordinary JSON error answer; one after it ends the
stream with ``{"type": "error", "message", "reason", "code"}``.
"""

from __future__ import annotations

import json
from asyncio import Future
from collections.abc import Awaitable, Callable
from typing import Any

from tornado import web

from .base import SandboxHandler, error_body

NDJSON = "application/x-ndjson"

#: Sends one line of the stream.
LineSink = Callable[[dict[str, Any]], Awaitable[None]]


class StreamingHandler(SandboxHandler):
    """A sandbox handler that can answer as a stream of JSON lines."""

    _streaming = False
    _client_gone = False

    def wants_stream(self) -> bool:
        """True when the ``Accept`` header asks for NDJSON."""
        return NDJSON in self.request.headers.get("Accept", "")

    def on_connection_close(self) -> None:
        """The client went away: the work goes on to its end (and its audit event), unseen."""
        self._client_gone = True
        super().on_connection_close()

    def _send_line(self, line: dict[str, Any]) -> None:
        # The flush is not awaited: a slow client must never hold up the work
        # (a snippet's pipes above all); the output cap bounds what piles up here.
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

    async def send_line(self, line: dict[str, Any]) -> None:
        """Write one line of the stream and flush it."""
        self._send_line(line)

    async def answer(self, work: Callable[[LineSink | None], Awaitable[dict[str, Any]]]) -> None:
        """Finish with ``await work(None)`` as JSON, or stream what ``work(sink)`` sends.

        ``work`` gets a sink only when the client accepts NDJSON; the dict it returns
        is the final ``{"type": "result", ...}`` line (or the JSON answer).
        """
        if not self.wants_stream():
            self.write_json(await self.call(work(None)))
            return
        try:
            result = await self.call(work(self.send_line))
        except web.HTTPError as exc:
            if not self._streaming:
                raise  # nothing sent yet: a normal JSON error answer
            self._send_line({"type": "error", **error_body(exc.status_code, exc)})
        else:
            self._send_line({"type": "result", **result})
        if not self._client_gone:
            self.finish(set_content_type=NDJSON)
