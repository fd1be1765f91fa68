"""The results file: one JSON line per finished item, appended as each one finishes.

A rerun with the same file resumes: items whose ``(id, digest)`` is already in
it are skipped. A line cut short by a crash is dropped before appending; a
result whose item has changed since (same id, other digest) is dropped too, so
every item of the batch appears exactly once when the batch is done.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from ..errors import InvalidRequest


class ResultLog:
    """An append-only JSONL file of item results."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: TextIO | None = None
        self._lock: TextIO | None = None

    def _take_lock(self) -> None:
        """One batch at a time per results file: two would run and write the same items."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = self.path.with_name(self.path.name + ".lock").open("a")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise InvalidRequest(
                f"another batch is writing to {self.path}; wait for it to finish, or stop it, "
                "and run this command again (it resumes)",
                code="results_busy",
            ) from None
        self._lock = lock

    def open(self, digests: dict[str, str]) -> dict[str, str]:
        """Repair and read the file; ``{id: digest}`` of the items of ``digests`` already done.

        ``digests`` maps the batch's item ids to their run digests. Results of the
        batch's items with another digest (the item changed) are dropped from the
        file; results of ids the batch does not hold are kept as they are.
        """
        self._take_lock()
        kept: list[str] = []
        done: dict[str, str] = {}
        dropped = False
        if self.path.exists():
            try:
                text = self.path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InvalidRequest(f"cannot read the results file {self.path}: {exc}") from None
            if text and not text.endswith("\n"):
                text, dropped = text[: text.rfind("\n") + 1], True  # a line cut by a crash
            for line in text.splitlines():
                record = _parse(line)
                if record is None:
                    dropped = True
                    continue
                rid, rdigest = str(record.get("id")), record.get("digest")
                if rid in digests and (rdigest != digests[rid] or rid in done):
                    dropped = True  # a changed item, or a second copy: it runs again / once
                    continue
                if rid in digests:
                    done[rid] = digests[rid]
                kept.append(line)
        if dropped:
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
            os.replace(tmp, self.path)
        self._file = self.path.open("a", encoding="utf-8")
        return done

    def append(self, record: dict[str, Any]) -> None:
        """Write one result line and flush it to the OS (a killed process keeps it)."""
        assert self._file is not None, "open() the log first"
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file (safe to call twice)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._lock is not None:
            self._lock.close()  # releases the lock; the empty .lock file stays
            self._lock = None


def _parse(line: str) -> dict[str, Any] | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "id" in record else None


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Every well-formed result line of a results file."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [r for r in map(_parse, lines) if r is not None]


def held_results(path: str | Path, digests: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """The records of a batch's items in a results file, first copy of each, read line by line.

    ``digests`` maps the batch's item ids to their run digests (as :meth:`ResultLog.open`
    takes them); a record of another digest is an older version of the item, left out.
    Nothing when the file does not exist (nothing was recorded yet).
    """
    seen: set[str] = set()
    if not Path(path).exists():
        return
    with Path(path).open(encoding="utf-8") as lines:
        for line in lines:
            record = _parse(line)
            if record is None:
                continue
            rid = str(record["id"])
            if rid not in seen and digests.get(rid) == record.get("digest"):
                seen.add(rid)
                yield record
