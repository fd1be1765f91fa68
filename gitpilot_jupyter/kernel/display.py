"""What a ``%%sandbox`` cell shows: live output, the footer line, short errors.

The short errors follow IPython's ``%%bash``: a failed snippet raises an
exception whose whole traceback is one line (IPython's ``_render_traceback_``
protocol), because the snippet's own traceback is already in the cell.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from subprocess import CalledProcessError
from typing import Any, TextIO

from IPython import get_ipython
from IPython.display import publish_display_data as _publish

from ..sandbox import rich
from ..sandbox.errors import RETRYABLE_CODES, SandboxError, ServerUnreachable, UnknownLanguage
from ..sandbox.languages import canonical_language, snippet_filename
from ..sandbox.report import blocked_message, failure_message, footer
from ..sandbox.results import RunResult
from .overflow import INLINE_CHARS, INLINE_LINES, OverflowBox, split_at_budget

# IPython's function is untyped: a typed alias keeps mypy strict here.
publish_display_data: Callable[..., None] = _publish

__all__ = [
    "CellEcho",
    "SandboxBlocked",
    "SandboxCellError",
    "SandboxRunError",
    "SandboxUnavailable",
    "blocked_message",
    "failure_message",
    "footer",
]


#: Lines a ``%%sandbox`` cell has above its snippet: the magic's own line.
MAGIC_LINES = 1

#: How each interpreter names a line of the snippet's file in its errors, ``{file}`` the
#: file's name: python ``File "inline.py", line 3``, node ``inline.js:3``, bash
#: ``inline.sh: line 3:``. Group 1 is what comes before the number.
_LINE_REFERENCES = {
    "python": r'(File "(?:[^"\n]*/)?{file}", line )(\d+)',
    "javascript": r"((?:^|[\s(/]){file}:)(\d+)",
    "bash": r"((?:^|[\s/]){file}: line )(\d+)",
}


def cell_numbered(text: str, language: str, offset: int = MAGIC_LINES) -> str:
    """``text`` (a snippet's stderr) with its line numbers counted as the cell counts them.

    The snippet is the cell without the magic's line, so its line 1 is the cell's line 2.
    """
    try:
        lang = canonical_language(language)
    except UnknownLanguage:
        return text  # never run: nothing to renumber
    pattern = _LINE_REFERENCES[lang].format(file=re.escape(snippet_filename(lang)))
    return re.sub(pattern, lambda m: f"{m.group(1)}{int(m.group(2)) + offset}", text)


def _publisher_flushes() -> bool:
    """True when the shell's display publisher flushes stdout and stderr itself before
    each display, as ipykernel's does: a flush from the run's thread waits for the
    kernel's IO thread (a loaded machine: milliseconds each), so it is not doubled."""
    shell = get_ipython()
    publisher = getattr(shell, "display_pub", None)
    return callable(getattr(publisher, "_flush_streams", None))


class CellEcho:
    """Print the snippet's output as it arrives: stdout to stdout, stderr to stderr.

    Writes are left to the kernel's stream batching (a few messages a second,
    not one per chunk); a switch between stdout and stderr flushes the stream
    written so far, so the cell shows them in the order they came. The end of
    a cell needs no flush of its own: ipykernel flushes both streams before it
    shows a traceback or a display and before it answers the cell (each flush
    from another thread waits for its IO thread).

    Past the inline budget (:mod:`.overflow`) the output goes into a bounded scroll
    box instead, shown by :meth:`finish` (or :meth:`flush`) when the run ends.

    A display output (a figure, a DataFrame...) becomes a real cell output, after the
    text written before it: saved in the notebook, there after reopening. It is
    published as :func:`~gitpilot_jupyter.sandbox.rich.for_trusted_view` makes it (a
    cell executed in the session is trusted, so its HTML is cleaned first).
    """

    def __init__(self, language: str | None = None) -> None:
        self._last: str | None = None
        self._written: set[str] = set()
        self._lines_left = INLINE_LINES
        self._chars_left = INLINE_CHARS
        self.overflow = OverflowBox()
        #: The snippet's language: its stderr's line numbers are shown as the cell's.
        self.language = language
        #: How many display outputs were published.
        self.displays = 0

    @staticmethod
    def _stream(name: str) -> TextIO:
        return sys.stdout if name == "stdout" else sys.stderr

    async def __call__(self, stream: str, text: str) -> None:
        if stream == rich.DISPLAY_STREAM:
            self.show(rich.parse_display(text))
            return
        inline, rest = split_at_budget(text, self._lines_left, self._chars_left)
        self._lines_left -= inline.count("\n")
        self._chars_left -= len(inline)
        if inline:
            self.write(stream, inline)
        if rest:
            if not self.overflow:
                self.flush()  # the inline part first, then the box below it
            self.overflow.add(stream, rest)

    def show(self, item: dict[str, Any]) -> None:
        """Publish a display output as a cell output, after the text that came before it."""
        if not _publisher_flushes():
            for name in sorted(self._written):
                self._stream(name).flush()
        self._last = None
        safe = rich.for_trusted_view(item)
        publish_display_data(data=safe["data"], metadata=safe.get("metadata") or {})
        self.displays += 1

    def finish(self) -> None:
        """Show the scroll box of the output past the budget, if there was any; what is
        written after (the footer) streams below it."""
        if self.overflow:
            self.overflow.show()
            self.overflow = OverflowBox()

    def write(self, stream: str, text: str) -> None:
        """Write ``text`` to ``stream`` (``stdout`` or ``stderr``) after what came before."""
        if self._last is not None and self._last != stream:
            self._stream(self._last).flush()
        self._last = stream
        self._written.add(stream)
        if stream == "stderr" and self.language is not None:
            text = cell_numbered(text, self.language)
        self._stream(stream).write(text)

    def flush(self) -> None:
        """Flush the streams written to (outside a kernel, say, before an error is shown),
        and show the scroll box of the output past the budget."""
        if self.overflow:
            for name in sorted(self._written):
                self._stream(name).flush()
            self.finish()
        for name in sorted(self._written):
            self._stream(name).flush()


class SandboxCellError(Exception):
    """A ``%%sandbox`` cell that did not succeed; IPython shows it as one line."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class SandboxBlocked(SandboxCellError):
    """The plan matched a destructive pattern; it was never run."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


#: The fix for an outage whose message does not say one already.
_OUTAGE_FIXES = {
    ServerUnreachable.code: "Check that the Jupyter server is running, then run the cell again.",
}


def is_outage(exc: SandboxError) -> bool:
    """True when the machinery failed (a backend or server down, busy or silent), not
    the request: the cell was fine and may simply be run again later."""
    return exc.status >= 500 or exc.code in RETRYABLE_CODES


class SandboxUnavailable(SandboxCellError):
    """The sandbox's backend or server is out of reach: not the user's mistake.

    Shown as one plain line, what failed and how to fix it, where a ``UsageError``
    would read as a mistake in the cell.
    """

    def __init__(self, error: SandboxError) -> None:
        fix = _OUTAGE_FIXES.get(error.code, "")
        message = error.message.rstrip()
        if fix:
            message = f"{message.rstrip('.')}. {fix}"
        super().__init__(f"the sandbox is not available: {message}")
        self.code = error.code


class SandboxStopped(SandboxCellError):
    """The user interrupted the cell; the run was killed where it ran (``result`` if any)."""

    def __init__(self, message: str, result: RunResult | None = None) -> None:
        super().__init__(message)
        self.result = result


class SandboxRunError(SandboxCellError, CalledProcessError):
    """The snippet exited non-zero, timed out or could not launch (as ``%%bash`` raises).

    It is a :class:`subprocess.CalledProcessError` like ``%%bash``'s, so code that
    catches that keeps working; ``result`` holds the whole envelope.
    """

    def __init__(self, result: RunResult) -> None:
        CalledProcessError.__init__(
            self, result.exit_code, result.command, result.stdout, result.stderr
        )
        self.result = result

    def __str__(self) -> str:
        return failure_message(self.result)
