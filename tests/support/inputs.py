"""A notebook's folder of data for the files-in tests: a CSV and a folder, and a snippet
that reads both."""

from __future__ import annotations

from pathlib import Path

CSV = "region,sales\nnorth,12\nsouth,30\n"
NOTES = "from the notebook's folder\n"
#: Prints the CSV's total (42) and the folder's note.
READ_BOTH = (
    "import csv\n"
    "print(sum(int(r['sales']) for r in csv.DictReader(open('sales.csv'))))\n"
    "print(open('data/notes.txt').read(), end='')\n"
)
#: What :data:`READ_BOTH` prints.
READ_BOTH_OUT = "42\n" + NOTES


def make_project(folder: Path) -> Path:
    """``folder`` (made if missing) with ``sales.csv`` and ``data/notes.txt``."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "sales.csv").write_text(CSV)
    (folder / "data" / "notes.txt").write_text(NOTES)
    return folder


def untouched(folder: Path) -> bool:
    """True when the project's files are as :func:`make_project` wrote them, and no more."""
    return (
        (folder / "sales.csv").read_text() == CSV
        and (folder / "data" / "notes.txt").read_text() == NOTES
        and sorted(p.name for p in (folder / "data").iterdir()) == ["notes.txt"]
    )
