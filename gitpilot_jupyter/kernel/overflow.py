"""A large output's bounded view: the first lines stream into the cell, the rest goes
into one scroll box shown when the run ends.

A flood of output streamed into a cell makes it tens of thousands of pixels tall and
freezes the page while it renders. Past :data:`INLINE_LINES` lines (or
:data:`INLINE_CHARS` characters) the cell gets one live line that counts what came
since, and at the end that line becomes a display with a ``text/html`` scroll box of
bounded height and the same text as ``text/plain``: a real output, saved in the
notebook and there again after reopening (and in any viewer without HTML).
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from typing import Any

from IPython.display import display as _display

from ..sandbox.display import OUTPUT_BOX_MAX_HEIGHT

#: IPython's ``display`` (untyped): answers a DisplayHandle with ``display_id=True``.
display: Callable[..., Any] = _display

#: Lines of a cell's output streamed as they are before the rest goes into the box.
INLINE_LINES = 100
#: Characters streamed as they are, whatever the lines (one long line counts too).
INLINE_CHARS = 10_000
#: At most one update of the live count per this many seconds (a flood sends few).
COUNT_EVERY_SEC = 0.5
#: How stderr stands out in the box: JupyterLab's own stderr colours (AA in both themes).
_STDERR_STYLE = "background:var(--jp-rendermime-error-background, #fdd)"


class OverflowBox:
    """The output past the inline budget, kept in order with its stream's name."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []
        # IPython's DisplayHandle (untyped), or None outside IPython.
        self._handle: Any = None
        self._shown = False
        self._counted_at = 0.0

    @property
    def text(self) -> str:
        """Everything the box holds, stdout and stderr in the order they came."""
        return "".join(text for _, text in self.parts)

    def add(self, stream: str, text: str) -> None:
        """Keep ``text``; now and then update the live line that counts it."""
        self.parts.append((stream, text))
        now = time.monotonic()
        if not self._shown:
            self._shown = True
            self._handle = display(self._count_bundle(), raw=True, display_id=True)
            self._counted_at = now
        elif self._handle is not None and now - self._counted_at >= COUNT_EVERY_SEC:
            self._handle.update(self._count_bundle(), raw=True)
            self._counted_at = now

    def _lines(self) -> int:
        text = self.text
        return text.count("\n") + (0 if not text or text.endswith("\n") else 1)

    def _count_bundle(self) -> dict[str, str]:
        return {
            "text/plain": f"… {self._lines():,} more lines so far: they show in a scroll box "
            "here when the run ends"
        }

    def bundle(self) -> dict[str, str]:
        """The box as a display bundle: the HTML scroll box and the plain text beside it."""
        lines = self._lines()
        pieces = "".join(
            f"<span style='{_STDERR_STYLE}'>{html.escape(text)}</span>"
            if stream == "stderr"
            else html.escape(text)
            for stream, text in self.parts
        )
        box = (
            f"<div class='gitpilot-output-more'>… {lines:,} more line{'s' * (lines != 1)} "
            f"(scroll):</div><pre class='gitpilot-output-box' tabindex='0' "
            f"style='max-height:{OUTPUT_BOX_MAX_HEIGHT};overflow:auto;margin:0;"
            "border:1px solid var(--jp-border-color1, #bdbdbd);padding:4px'>"
            f"{pieces}</pre>"
        )
        return {"text/html": box, "text/plain": self.text}

    def show(self) -> None:
        """Turn the live line into the box (the output kept in the notebook)."""
        if self._handle is not None:
            self._handle.update(self.bundle(), raw=True)

    def __bool__(self) -> bool:
        return bool(self.parts)


def split_at_budget(text: str, lines_left: int, chars_left: int) -> tuple[str, str]:
    """``text`` cut where the inline budget ends: what still streams, and the rest."""
    if lines_left <= 0 or chars_left <= 0:
        return "", text
    cut = min(len(text), chars_left)
    seen = 0
    for index, char in enumerate(text[:cut]):
        if char == "\n":
            seen += 1
            if seen >= lines_left:
                cut = index + 1
                break
    return text[:cut], text[cut:]
