"""The Runner's job folders on this host: one per run, never deleted by the Runner itself.

Each holds the run's workspace (the snippet's code, what it wrote) and its output
folder. Where the lifecycle owns the jobs folder (it mounts it into the Runner at
the same path), the backend prunes it after every run and the lifecycle at start
and stop: a folder older than the Runner's longest run cannot be in use.
"""

from __future__ import annotations

import os
import shutil
import time

from .config import JOBS_MAX_AGE_SEC


def prune_job_folders(
    jobs_dir: str, max_age_sec: float = JOBS_MAX_AGE_SEC
) -> tuple[int, list[str]]:
    """Remove ``job-*`` folders older than ``max_age_sec`` (blocking): (count, failures)."""
    removed, failed = 0, []
    cutoff = time.time() - max_age_sec
    try:
        entries = list(os.scandir(jobs_dir))
    except FileNotFoundError:
        return 0, []
    except OSError as exc:
        return 0, [f"{jobs_dir}: {exc.strerror or exc}"]
    for entry in entries:
        if not entry.name.startswith("job-") or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime >= cutoff:
                continue
            shutil.rmtree(entry.path)
            removed += 1
        except OSError as exc:
            failed.append(f"{entry.path}: {exc.strerror or exc}")
    return removed, failed


def run_folder(jobs_dir: str, filename: str, code: str, since: float) -> str | None:
    """The job folder of the run that wrote ``code`` as ``ws/<filename>`` (blocking).

    Only folders made at or after ``since`` (a wall-clock time) count, and only when
    exactly one matches: two runs of the same code at once leave both to
    :func:`prune_job_folders`, as a folder of a run under way must never go.
    """
    wanted = code.encode("utf-8")
    found: list[str] = []
    try:
        entries = list(os.scandir(jobs_dir))
    except OSError:
        return None
    for entry in entries:
        if not entry.name.startswith("job-") or not entry.is_dir(follow_symlinks=False):
            continue
        path = os.path.join(entry.path, "ws", filename)
        try:
            if entry.stat(follow_symlinks=False).st_mtime < since - 1:
                continue
            if os.path.getsize(path) != len(wanted):
                continue
            with open(path, "rb") as handle:
                if handle.read() == wanted:
                    found.append(entry.path)
        except OSError:
            continue
    return found[0] if len(found) == 1 else None


def forget_run(jobs_dir: str, filename: str, code: str, since: float, *, ran: bool) -> None:
    """After a run: remove its own job folder (when the Runner ran it), then the old ones.

    Blocking. What cannot be removed (a file the snippet made read-only to us) stays
    for the next prune; nothing here fails a run.
    """
    if ran:
        folder = run_folder(jobs_dir, filename, code, since)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    prune_job_folders(jobs_dir)
