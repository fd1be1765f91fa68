"""How every approval view shows a plan's code: nothing hidden, nothing reordered, cuts stated.

A hostile snippet may carry terminal escapes (``\\x1b[2K\\x1b[1G`` erases the line a
terminal just printed), carriage returns, bidi overrides (U+202E reverses what a
browser shows) or zero-width characters, and may put its payload after the lines a
view shows. Every view of a plan (CLI ``plans``/``approve``/``run``, the notebook
approval card, the lab dialog and Pending Plans) goes through this module, so the
rule is written once. ``labextension/src/escape.ts`` is its TypeScript twin; both
are tested against the same cases (``tests/unit/display_cases.json``).

The rule: a character is shown as an escape (``\\x1b``, ``\\u202e``, ``\\U000e0041``)
when its Unicode category is Cc (controls, except newline and tab), Cf (format:
bidi controls, zero-width characters, BOM, tag characters), Zl, Zp (line and
paragraph separators) or Cs (a lone surrogate). Lines are split on ``\\n`` only.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

#: Unicode categories shown escaped.
ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
#: Control characters that are shown as they are (a newline ends a line; a tab is blank space).
KEPT = frozenset("\n\t")
#: Lines of code an approval view shows before it says how many more there are.
PREVIEW_LINES = 40
#: Characters of one line shown before the view says how many more the line has.
PREVIEW_LINE_CHARS = 240
#: The same limits for views that scroll and wrap (the notebook card, the lab dialog and
#: Pending Plans, whose ``render.ts`` has the same numbers).
SCROLLING_PREVIEW_LINES = 500
SCROLLING_PREVIEW_LINE_CHARS = 1000


def needs_escape(char: str) -> bool:
    """True when ``char`` must be shown as an escape."""
    return char not in KEPT and unicodedata.category(char) in ESCAPED_CATEGORIES


def escape_char(char: str) -> str:
    """``char`` as a visible escape: ``\\xNN``, ``\\uNNNN`` or ``\\UNNNNNNNN``."""
    point = ord(char)
    if point < 0x100:
        return f"\\x{point:02x}"
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def escape_segments(text: str) -> list[tuple[str, bool]]:
    """``text`` cut into ``(piece, escaped)`` runs, so a view can mark escapes visibly."""
    segments: list[tuple[str, bool]] = []
    plain: list[str] = []
    for char in text:
        if needs_escape(char):
            if plain:
                segments.append(("".join(plain), False))
                plain = []
            segments.append((escape_char(char), True))
        else:
            plain.append(char)
    if plain:
        segments.append(("".join(plain), False))
    return segments


def escape_text(text: str) -> str:
    """``text`` with every control, format and bidi character shown as an escape."""
    return "".join(piece for piece, _ in escape_segments(text))


def count_escapes(text: str) -> int:
    """How many characters of ``text`` a view shows escaped."""
    return sum(1 for char in text if needs_escape(char))


@dataclass(frozen=True)
class CodePreview:
    """What a view shows of a plan's code, and what it must say it left out."""

    #: The lines shown as ``(piece, marked)`` runs: escapes and cut markers are marked.
    segments: list[list[tuple[str, bool]]]
    #: The code's line count.
    total_lines: int
    #: Lines not shown (after the last one shown).
    hidden_lines: int
    #: Lines cut short (their end is not shown).
    cut_lines: int
    #: Characters shown escaped in the whole code (not only the lines shown).
    escaped: int
    #: The line limit the cut lines were cut at.
    max_line_chars: int = PREVIEW_LINE_CHARS

    @property
    def lines(self) -> list[str]:
        """The lines shown, escaped, each cut to the line limit with a marker."""
        return ["".join(piece for piece, _ in line) for line in self.segments]

    @property
    def notes(self) -> list[str]:
        """The sentences a view prints under the code (empty when nothing was changed)."""
        notes: list[str] = []
        if self.hidden_lines:
            notes.append(
                f"{self.hidden_lines} more line{'s' * (self.hidden_lines != 1)} not shown "
                f"(the code has {self.total_lines}); the digest covers all of it"
            )
        if self.cut_lines:
            notes.append(
                f"{self.cut_lines} line{'s' * (self.cut_lines != 1)} cut at "
                f"{self.max_line_chars} characters"
            )
        if self.escaped:
            notes.append(
                f"{self.escaped} control, format or bidi character"
                f"{'s' * (self.escaped != 1)} shown as escapes (\\x.., \\u..)"
            )
        return notes


def code_lines(code: str) -> list[str]:
    """``code`` split on ``\\n`` (a final newline does not start another line)."""
    lines = code.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    return lines


def cut_line(line: str, limit: int = PREVIEW_LINE_CHARS) -> list[tuple[str, bool]]:
    """``line`` escaped and cut to ``limit`` characters of the original, the cut marked."""
    if len(line) <= limit:
        return escape_segments(line)
    rest = len(line) - limit
    return [
        *escape_segments(line[:limit]),
        (f" … [{rest} more character{'s' * (rest != 1)}]", True),
    ]


def code_preview(
    code: str, *, max_lines: int = PREVIEW_LINES, max_line_chars: int = PREVIEW_LINE_CHARS
) -> CodePreview:
    """The first ``max_lines`` lines of ``code``, escaped, with what was left out counted."""
    lines = code_lines(code)
    shown = [cut_line(line, max_line_chars) for line in lines[:max_lines]]
    return CodePreview(
        segments=shown,
        total_lines=len(lines),
        hidden_lines=max(0, len(lines) - max_lines),
        cut_lines=sum(len(line) > max_line_chars for line in lines[:max_lines]),
        escaped=count_escapes(code),
        max_line_chars=max_line_chars,
    )
