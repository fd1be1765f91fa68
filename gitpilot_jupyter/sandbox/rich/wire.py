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
import marshal
import os
import secrets
import sys
import types
from collections.abc import Iterator, Sequence
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
#: The environment variable a python run of the server's own interpreter gets the shim
#: in, compiled (its marshal, as hex), and the command's code that runs it. Compiling
#: the shim's text in every run took ~1.4 ms of a 10 ms interpreter start; a marshal is
#: read in ~0.1 ms. (In the environment, not the argv: the interpreter decodes a long
#: argument ~0.7 ms slower than a variable. The loader pops it: the snippet and its
#: children never see it in ``os.environ``.)
SHIM_ENV = "GITPILOT_SHIM"
SHIM_LOADER = (
    "import marshal,os;"
    f'c,n=marshal.loads(bytes.fromhex(os.environ.pop("{SHIM_ENV}")));'
    "type(lambda:0)(c,globals()|n)()"
)
#: The shim's one function (what the loader calls).
SHIM_FUNCTION = "_gitpilot_shim"
#: How a launch plan shows where the compiled shim comes from.
SHIM_ENV_SHOWN = f"{SHIM_ENV}={SHIM_SHOWN} compiled by the server (marshal, hex)"


def new_nonce() -> str:
    """A fresh nonce: 32 hex characters."""
    return secrets.token_hex(NONCE_CHARS // 2)


def _shim_names() -> dict[str, object]:
    """The values of the shim's constants (its lines ``NAME = ...`` at its top)."""
    return {
        "FRAME_MARK": FRAME_MARK,
        "NONCE_ENV": NONCE_ENV,
        "BACKEND_MODULE": BACKEND_MODULE,
        "SHOW_LAST": SHOW_LAST,
        "DISPLAY_RUNTIME": DISPLAY_RUNTIME_FILE.read_text(),
    }


@functools.cache
def shim_source() -> str:
    """The shim's text, its constants set from this module (read once).

    The file's own lines ``NAME = ...`` at its top are replaced by the values here
    (:func:`..scripts.with_names`).
    """
    given = {name: repr(value) for name, value in _shim_names().items()}
    return with_names(SHIM_FILE.read_text(), given)


@functools.cache
def compiled_shim() -> str:
    """The shim compiled by this process's interpreter, for :data:`SHIM_LOADER`: the hex
    of the marshal of its function's code and its constants (compiled as ``-c`` compiles:
    file name ``<string>``, no ``-O``). The loader calls the function itself, so a
    snippet has as many frames above it as with the shim's text."""
    module = compile(shim_source(), "<string>", "exec", dont_inherit=True, optimize=0)
    function = next(
        code
        for code in module.co_consts
        if isinstance(code, types.CodeType) and code.co_name == SHIM_FUNCTION
    )
    return marshal.dumps((function, _shim_names())).hex()


@functools.cache
def _own_interpreter(interpreter: str) -> bool:
    """True when ``interpreter`` is the binary this process runs on: only it reads this
    process's marshal format for certain (the format is the interpreter version's)."""
    return os.path.realpath(interpreter) == os.path.realpath(sys.executable)


def python_command(interpreter: str, filename: str) -> list[str]:
    """A python run's command: the shim, then the snippet's file (``sys.argv`` then is
    ``[filename]``, as for ``python filename``). For the server's own interpreter the
    shim comes compiled, through the environment (:func:`shim_env`)."""
    if _own_interpreter(interpreter):
        return [interpreter, "-c", SHIM_LOADER, filename]
    return [interpreter, "-c", shim_source(), filename]


def is_shim_command(argv: Sequence[str]) -> bool:
    """True for a python run's command through the shim, either way it comes."""
    return len(argv) > 2 and argv[1] == "-c" and argv[2] in (SHIM_LOADER, shim_source())


def shim_env(argv: Sequence[str]) -> dict[str, str]:
    """What the environment of a run of ``argv`` (the command, or the chain around it)
    must add: the compiled shim, where its loader is in ``argv``."""
    return {SHIM_ENV: compiled_shim()} if SHIM_LOADER in argv else {}


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
