"""The wire of display outputs: frames in a run's stdout, and the python shim that writes them.

A run's environment holds its nonce in :data:`NONCE_ENV` (32 hex characters, one per
run; a warm slot's, one per slot). A frame is::

    b"\\x1egitpilot-display " + nonce + b" " + str(len(payload)).encode() + b"\\n" + payload

``payload`` is UTF-8 JSON ``{"data": {mime: value}, "metadata": {...}}``; the writer
flushes its own stdout first, so the frame sits between the text before and after it.
Any language may write one (a bash snippet with ``printf``); without a nonce, or with
another one, nothing is a frame: the bytes stay stdout text.

:class:`FrameSplitter` takes the frames out of stdout as it is read, before the output
cap (:class:`~..output.CappedText`): the text left is exactly what the run printed.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..scripts import with_names

#: The run's nonce, in its environment.
NONCE_ENV = "GITPILOT_DISPLAY"
#: What starts a frame, before its nonce.
FRAME_MARK = b"\x1egitpilot-display "
#: The nonce's length (hex characters) and the longest length field a header may carry.
NONCE_CHARS = 32
_MAX_LENGTH_DIGITS = 12
#: The matplotlib backend the shim provides (``MPLBACKEND=module://...``).
BACKEND_MODULE = "gitpilot_display_matplotlib"
#: The one file name whose last expression is shown: an inline snippet's (a file run's
#: own file is a program, shown nothing but what it displays).
SHOW_LAST = "inline.py"

#: The shim, a file of its own (checked by ruff and mypy like the package).
SHIM_FILE = Path(__file__).parent / "shim.py"
#: The display runtime the shim carries (compiled in the run only when needed).
DISPLAY_RUNTIME_FILE = Path(__file__).parent / "shim_display.py"
#: How a launch plan shows the shim's text (``debug --show-launch``, the goldens).
SHIM_SHOWN = f'"$(cat {SHIM_FILE.parent.name}/{SHIM_FILE.name})"'


def new_nonce() -> str:
    """A fresh nonce: 32 hex characters."""
    return secrets.token_hex(NONCE_CHARS // 2)


@functools.cache
def shim_source() -> str:
    """The shim's text, its constants set from this module (read once).

    The file's own lines ``NAME = ...`` at its top are replaced by the values here
    (:func:`..scripts.with_names`).
    """
    given = {
        "FRAME_MARK": repr(FRAME_MARK),
        "NONCE_ENV": repr(NONCE_ENV),
        "BACKEND_MODULE": repr(BACKEND_MODULE),
        "SHOW_LAST": repr(SHOW_LAST),
        "DISPLAY_RUNTIME": repr(DISPLAY_RUNTIME_FILE.read_text()),
    }
    return with_names(SHIM_FILE.read_text(), given)


def python_command(interpreter: str, filename: str) -> list[str]:
    """A python run's command: the shim, then the snippet's file (``sys.argv`` then is
    ``[filename]``, as for ``python filename``)."""
    return [interpreter, "-c", shim_source(), filename]


def frame(nonce: str, payload: bytes) -> bytes:
    """One frame carrying ``payload`` (what a writer sends; the tests' and the docs')."""
    return FRAME_MARK + nonce.encode("ascii") + b" %d\n" % len(payload) + payload


@dataclass(frozen=True)
class Text:
    """Bytes of stdout text."""

    data: bytes


@dataclass(frozen=True)
class Frame:
    """A whole frame's payload (``size`` bytes; ``payload`` None: not kept, too big)."""

    size: int
    payload: bytes | None


class FrameSplitter:
    """Splits a run's stdout into text and frames, chunk by chunk.

    A frame's payload is held until it is whole, up to ``max_payload`` bytes; a longer
    one is read and discarded as it comes (its :class:`Frame` has no payload), so a
    100 MB image never sits in memory. Bytes that only look like the start of a frame
    (another nonce, no length) are text. Without a nonce everything is text.
    """

    def __init__(self, nonce: str, max_payload: int) -> None:
        self._start = FRAME_MARK + nonce.encode("ascii") + b" " if nonce else b""
        self._max = max_payload
        self._held = b""  # text that may be the start of a header
        self._size = -1  # the payload being read (-1: none)
        self._parts: list[bytes] | None = None
        self._left = 0

    def feed(self, chunk: bytes) -> Iterator[Text | Frame]:
        """The text and the whole frames in ``chunk`` (with what came before), in order."""
        if not self._start:
            if chunk:
                yield Text(chunk)
            return
        data = self._held + chunk if self._held else chunk
        self._held = b""
        at = 0
        while at < len(data):
            if self._size >= 0:
                taken = data[at : at + self._left]
                at += len(taken)
                self._left -= len(taken)
                if self._parts is not None:
                    self._parts.append(taken)
                if self._left == 0:
                    payload = b"".join(self._parts) if self._parts is not None else None
                    yield Frame(self._size, payload)
                    self._size, self._parts = -1, None
                continue
            mark = data.find(b"\x1e", at)
            if mark < 0:
                yield Text(data[at:])
                return
            if mark > at:
                yield Text(data[at:mark])
            header_end = data.find(b"\n", mark, mark + len(self._start) + _MAX_LENGTH_DIGITS + 1)
            if header_end < 0:
                if len(data) - mark < len(self._start) + _MAX_LENGTH_DIGITS + 1 and (
                    self._start.startswith(data[mark : mark + len(self._start)])
                ):
                    self._held = data[mark:]  # perhaps a header, cut by the read
                    return
                yield Text(data[mark : mark + 1])
                at = mark + 1
                continue
            header = data[mark:header_end]
            digits = header[len(self._start) :]
            if not header.startswith(self._start) or not digits.isdigit():
                yield Text(data[mark : mark + 1])
                at = mark + 1
                continue
            self._size = self._left = int(digits)
            self._parts = [] if self._size <= self._max else None
            at = header_end + 1
            if self._size == 0:
                yield Frame(0, b"")
                self._size, self._parts = -1, None

    def finish(self) -> Iterator[Text | Frame]:
        """What is left at the end: held bytes are text; a frame cut short is dropped
        (its size then says how much was announced)."""
        if self._held:
            yield Text(self._held)
            self._held = b""
        if self._size >= 0:
            yield Frame(-1, None)
            self._size, self._parts = -1, None
