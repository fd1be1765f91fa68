"""How every approval view shows a plan's code: nothing hidden, nothing reordered, cuts stated.

A hostile snippet may carry terminal escapes (``\\x1b[2K\\x1b[1G`` erases the line a
terminal just printed), carriage returns, bidi overrides (U+202E reverses what a
browser shows) or zero-width characters, and may put its payload after the lines a
view shows. Every view of a plan (CLI ``plans``/``approve``/``run``, the notebook
approval card, the lab dialog and Pending Plans) goes through this module, so the
rule is written once. ``labextension/src/escape.ts`` is its TypeScript twin; both
are tested against the same cases (``tests/unit/display_cases.json``).

The rule: a character is shown as an escape (``\\x1b``, ``\\u202e``, ``\\U000e0041``)
when

* its Unicode category is Cc (controls, except newline and tab), Cf (format: bidi
  controls, zero-width characters, BOM, tag characters), Zl, Zp (line and paragraph
  separators) or Cs (a lone surrogate);
* it is a default-ignorable code point (:data:`INVISIBLE_RANGES`: variation selectors,
  the Hangul fillers U+115F, U+1160, U+3164, U+FFA0, which Python accepts in names, so
  ``\\u3164 = os.system`` binds an invisible name);
* it is not ASCII but folds to ASCII letters or digits under NFKC, as Python folds
  names (fullwidth ``\\uff45``, mathematical ``\\U0001d41e``: ``\\U0001d41exec`` is ``exec``);
* it is a Greek, Cyrillic, Armenian or Cherokee letter in a word that also has a Latin
  letter (``\\u043es``: a Cyrillic ``o`` then a Latin ``s``), where it passes for the Latin one.

Lines are split on ``\\n`` only.
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
#: The height of a notebook's box for a run's large output (the cell's and the card's):
#: about twenty lines, then it scrolls, so a flood never makes the page tall.
OUTPUT_BOX_MAX_HEIGHT = "24em"


#: Default-ignorable code points (Unicode's ``Default_Ignorable_Code_Point``), inclusive
#: ranges: invisible wherever they are shown, whatever their category.
INVISIBLE_RANGES = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
#: Letters that pass for Latin ones beside them (Greek, Cyrillic, Armenian, Cherokee, the
#: Latin small capitals of the phonetic extensions), inclusive ranges.
LOOKALIKE_RANGES = (
    (0x0370, 0x03FF),
    (0x0400, 0x052F),
    (0x0530, 0x058F),
    (0x13A0, 0x13FF),
    (0x1C80, 0x1C8F),
    (0x1D00, 0x1D7F),
    (0x1F00, 0x1FFF),
    (0x2DE0, 0x2DFF),
    (0xA640, 0xA69F),
    (0xAB70, 0xABBF),
)


def _within(char: str, ranges: tuple[tuple[int, int], ...]) -> bool:
    point = ord(char)
    return any(low <= point <= high for low, high in ranges)


def _folds_to_ascii(char: str) -> bool:
    """True for a non-ASCII character that NFKC turns into ASCII letters or digits."""
    if char.isascii():
        return False
    folded = unicodedata.normalize("NFKC", char)
    return folded.isascii() and folded.isalnum()


def needs_escape(char: str) -> bool:
    """True when ``char`` must be shown as an escape wherever it stands."""
    if char in KEPT:
        return False
    return (
        unicodedata.category(char) in ESCAPED_CATEGORIES
        or _within(char, INVISIBLE_RANGES)
        or _folds_to_ascii(char)
    )


def _in_word(char: str) -> bool:
    """A character of a name: a letter, mark, digit or connector (``_``)."""
    category = unicodedata.category(char)
    return category[0] in "LMN" or category == "Pc"


def escape_flags(text: str) -> list[bool]:
    """For each character of ``text``, whether a view shows it as an escape.

    :func:`needs_escape`, plus the look-alike letters of a word that has a Latin letter.
    """
    flags = [needs_escape(char) for char in text]
    start = 0
    for end in range(len(text) + 1):
        if end < len(text) and _in_word(text[end]):
            continue
        word = text[start:end]
        if any("a" <= c.lower() <= "z" for c in word):
            for offset, char in enumerate(word):
                if _within(char, LOOKALIKE_RANGES):
                    flags[start + offset] = True
        start = end + 1
    return flags


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
    for char, escaped in zip(text, escape_flags(text), strict=True):
        if escaped:
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
    """``text`` with every control, format, bidi, invisible and look-alike character escaped."""
    return "".join(piece for piece, _ in escape_segments(text))


def count_escapes(text: str) -> int:
    """How many characters of ``text`` a view shows escaped."""
    return sum(escape_flags(text))


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
                f"{self.escaped} hidden or look-alike character"
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
