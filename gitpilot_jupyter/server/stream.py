"""Answers as NDJSON streams: lines as the work produces them, then its result.

A client that sends ``Accept: application/x-ndjson`` gets one JSON object per
line, flushed at once, and last ``{"type": "result", ...}``. An error found
before the first line is an ordinary JSON error answer; one after it ends the
stream with ``{"type": "error", "message", "reason", "code"}``.

A client that does not read costs the server at most :attr:`StreamLimits.buffer_bytes`
of lines: past it the work waits for the client (a snippet's output waits in its
pipe), and a stream that makes no progress for :attr:`StreamLimits.stall_sec` with
lines unread is closed as if the client had gone (its run is stopped, the log and
the audit say so).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import struct
import termios
import time
from asyncio import Future
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from tornado import web
from tornado.http1connection import HTTP1Connection

from ..sandbox.rich import json_with_outputs
from .base import SandboxHandler, error_body

NDJSON = "application/x-ndjson"

#: Where the app keeps its :class:`StreamLimits` in the web app's settings.
STREAM_LIMITS_KEY = "gitpilot_sandbox_stream_limits"


@dataclass(frozen=True)
class StreamLimits:
    """What a client that stops reading may cost: unread bytes, then seconds."""

    #: Bytes of lines written and not yet taken by the client before the work waits.
    buffer_bytes: int = 1024 * 1024
    #: Seconds with lines unread and none taken before the stream is closed.
    stall_sec: float = 30.0


#: One line of the stream: an object, or its JSON text already made (one line, no
#: newline in it: a 1 MB image's output, encoded once, is not encoded again).
Line = dict[str, Any] | str
#: Sends one line of the stream.
LineSink = Callable[[Line], Awaitable[None]]


def encoded_line(line: Line) -> bytes:
    """One line of the stream as sent: its JSON (made now unless it is made) and ``\n``."""
    return ((line if isinstance(line, str) else json.dumps(line)) + "\n").encode()


def result_line(result: dict[str, Any]) -> str:
    """The stream's last line, ``{"type": "result", ...}`` (a run's images not escaped
    again: :func:`..sandbox.rich.json_with_outputs`)."""
    return json_with_outputs({"type": "result", **result})


class StreamingHandler(SandboxHandler):
    """A sandbox handler that can answer as a stream of JSON lines."""

    _streaming = False
    _client_gone = False
    #: Bytes of lines written, and of those the connection has handed to the socket.
    _written = 0
    _taken = 0
    #: What the client had taken at the last look, and when that last grew.
    _client_took = 0
    _progress_at = 0.0
    _watchdog: asyncio.TimerHandle | None = None
    _room: asyncio.Event | None = None

    @property
    def stream_limits(self) -> StreamLimits:
        """The server's :class:`StreamLimits` (the defaults when the app set none)."""
        limits = self.settings.get(STREAM_LIMITS_KEY)
        return limits if isinstance(limits, StreamLimits) else StreamLimits()

    @property
    def unread_bytes(self) -> int:
        """Bytes of lines the server holds for the client (not yet handed to the socket)."""
        return self._written - self._taken

    def _socket_unsent(self) -> int:
        """Bytes handed to the socket that the client has not acknowledged (0 unknown).

        The kernel's send buffer grows to megabytes on its own: a client that stops
        reading is seen there first, long before the server's own buffer fills.
        """
        stream = getattr(self.request.connection, "stream", None)
        sock = getattr(stream, "socket", None)
        if sock is None or not hasattr(termios, "TIOCOUTQ"):
            return 0
        try:  # TIOCOUTQ is SIOCOUTQ on a socket (Linux)
            raw = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
        except OSError:
            return 0
        unsent: int = struct.unpack("i", raw)[0]
        return unsent

    def wants_stream(self) -> bool:
        """True when the ``Accept`` header asks for NDJSON."""
        return NDJSON in self.request.headers.get("Accept", "")

    def on_connection_close(self) -> None:
        """The client went away: the work goes on to its end (and its audit event), unseen."""
        self._client_gone = True
        self._make_room()
        super().on_connection_close()

    def _make_room(self) -> None:
        if self._room is not None:
            self._room.set()

    def _send_line(self, line: Line) -> None:
        # The flush is not awaited here (send_line waits only past the buffer's bound).
        if self._client_gone:
            return
        if not self._streaming:
            self._streaming = True
            self.set_header("Content-Type", NDJSON)
            # Reverse proxies must pass each line on at once instead of buffering.
            self.set_header("X-Accel-Buffering", "no")
            self.set_header("Cache-Control", "no-cache")
        data = encoded_line(line)
        self._written += len(data)
        upto = self._written
        self.write(data)
        self.flush().add_done_callback(lambda future: self._flushed(future, upto))
        if self._watchdog is None:  # the stall clock starts at the first line unread
            self._progress_at = time.monotonic()
            self._arm_watchdog()

    def _flushed(self, future: Future[None], upto: int) -> None:
        if future.exception() is not None:
            self._client_gone = True
            self._make_room()
            return
        self._taken = max(self._taken, upto)
        if self.unread_bytes <= self.stream_limits.buffer_bytes:
            self._make_room()

    def _arm_watchdog(self) -> None:
        look_every = max(0.25, self.stream_limits.stall_sec / 4)
        self._watchdog = asyncio.get_running_loop().call_later(look_every, self._check_stall)

    def _check_stall(self) -> None:
        """A look at the client: has it taken bytes since the last look, or for too long?"""
        self._watchdog = None
        unsent = self.unread_bytes + self._socket_unsent()
        if self._client_gone or not unsent:
            return  # all taken: the next line arms the watchdog again
        now = time.monotonic()
        took = self._written - unsent
        if took > self._client_took:
            self._client_took, self._progress_at = took, now
        idle = now - self._progress_at
        if idle < self.stream_limits.stall_sec:
            self._arm_watchdog()
            return
        self.log.warning(
            "sandbox stream %s: the client took nothing for %.0f s with %d bytes unread; "
            "closing the stream (its run is stopped)",
            self.request.path,
            idle,
            unsent,
        )
        self.on_connection_close()  # what a client that went away gets: the run stops
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):
            connection.close()

    async def send_line(self, line: Line) -> None:
        """Write one line of the stream and flush it; past the buffer's bound, wait for
        the client to take some (or for the stall timeout to close the stream)."""
        self._send_line(line)
        while not self._client_gone and self.unread_bytes > self.stream_limits.buffer_bytes:
            if self._room is None:
                self._room = asyncio.Event()
            self._room.clear()
            await self._room.wait()

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
            self._send_line(result_line(result))
        if not self._client_gone:
            self.finish(set_content_type=NDJSON)
