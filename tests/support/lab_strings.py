"""The lab extension's user-facing strings, as its translator sees them.

Every string the extension shows goes through ``trans.__('…')`` or ``trans._n('…', '…', n)``,
or is marked ``N_('…')`` where it is defined and translated later (a table of labels).
This module finds them in ``labextension/src/*.ts`` so a test can hold each shipped
catalog (``gitpilot_jupyter/locale/<locale>/LC_MESSAGES/gitpilot_jupyter.json``) to them.

    python -m tests.support.lab_strings fr_FR   # what the French catalog lacks, and what is stale
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "labextension" / "src"
#: The gettext domain of the extension (labextension/src/i18n.ts DOMAIN).
DOMAIN = "gitpilot_jupyter"
LOCALES = ROOT / "gitpilot_jupyter" / "locale"

_LITERAL = r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*\""""
#: A literal, or literals joined with ``+`` (a long string prettier wrapped).
_JOINED = rf"(?:{_LITERAL})(?:\s*\+\s*(?:{_LITERAL}))*"
_CALL = re.compile(
    rf"(?:\btrans\.(?P<fn>__|_n)|\b(?P<mark>N_))\(\s*(?P<one>{_JOINED})"
    rf"(?:\s*,\s*(?P<two>{_JOINED}))?"
)
_ESCAPES = {"n": "\n", "t": "\t", "'": "'", '"': '"', "\\": "\\"}


def _unquote(joined: str) -> str:
    parts = re.findall(_LITERAL, joined)
    return "".join(
        re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), part[1:-1])
        for part in parts
    )


def messages(sources: Path = SOURCES) -> dict[str, str | None]:
    """``{msgid: msgid_plural or None}`` for every string the extension translates."""
    found: dict[str, str | None] = {}
    for path in sorted(sources.glob("*.ts")):
        text = path.read_text(encoding="utf-8")
        for match in _CALL.finditer(text):
            msgid = _unquote(match.group("one"))
            plural = None
            if match.group("fn") == "_n":
                plural = _unquote(match.group("two") or "")
            found[msgid] = plural
    return found


def catalog_path(locale: str) -> Path:
    """Where the catalog of ``locale`` (``fr_FR``) is shipped."""
    return LOCALES / locale / "LC_MESSAGES" / f"{DOMAIN}.json"


def load_catalog(locale: str) -> dict[str, object]:
    """The shipped catalog (Jed JSON: a ``""`` header, then ``msgid: [forms...]``)."""
    data: dict[str, object] = json.loads(catalog_path(locale).read_text(encoding="utf-8"))
    return data


def differences(locale: str) -> tuple[list[str], list[str]]:
    """(msgids the catalog lacks, msgids it has that the sources no longer use)."""
    wanted = messages()
    have = {key for key in load_catalog(locale) if key}
    return sorted(set(wanted) - have), sorted(have - set(wanted))


def main(argv: list[str]) -> int:
    """Print what the catalog of ``argv[0]`` lacks and what is stale; exit 1 if anything."""
    locale = argv[0] if argv else "fr_FR"
    missing, stale = differences(locale)
    for msgid in missing:
        print(f"missing: {json.dumps(msgid, ensure_ascii=False)}")
    for msgid in stale:
        print(f"stale:   {json.dumps(msgid, ensure_ascii=False)}")
    return 1 if missing or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
