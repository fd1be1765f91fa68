"""What the Runner keeps on this host: job folders and its own copies, never deleted by it.

Runner 0.1.0 keeps, for every run:

* a job folder ``job-*`` in its jobs folder: the run's workspace (the snippet's code,
  its stdin, what it wrote) and its output folder;
* in its state folder (``MATRIXLAB_STATE_DIR``; the lifecycle puts it in the jobs
  folder, see :func:`~.config.state_path`): the extracted workspace zip
  ``seeds/seed_*`` (code and stdin again), ``runs/<sandbox_id>/metadata.json`` (the
  run's stdout and stderr), ``uploads/ws_*.zip``, ``warm-runs/*``.

Where the lifecycle owns the jobs folder (it mounts it into the Runner at the same
path), the backend removes a run's own copies after the run and prunes every copy
older than the Runner's longest run (:data:`~.config.JOBS_MAX_AGE_SEC`: none of a
run under way) after every run, and the lifecycle at start and stop. The Runner
writes its state as root: what this server may not remove goes through ``docker exec
<runner> rm -rf`` in the Runner's container, where the lifecycle names one.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable

from .config import JOBS_MAX_AGE_SEC, state_path

#: In the Runner's state folder: (subfolder, prefix of the names it keeps there).
STATE_KEPT = (("seeds", "seed_"), ("runs", ""), ("uploads", "ws_"), ("warm-runs", ""))
#: The file the Runner writes a ``/code/run`` bash snippet (our wrapper) to in its seed.
CODE_RUN_SCRIPT = "script.sh"


def _entries(folder: str, prefix: str) -> list[os.DirEntry[str]]:
    try:
        return [e for e in os.scandir(folder) if e.name.startswith(prefix)]
    except OSError:
        return []


def kept_paths(jobs_dir: str) -> list[tuple[str, float]]:
    """Every job folder and state copy the Runner keeps under ``jobs_dir``, with its mtime."""
    found: list[tuple[str, float]] = []
    places = [(jobs_dir, "job-")] + [
        (os.path.join(state_path(jobs_dir), sub), prefix) for sub, prefix in STATE_KEPT
    ]
    for folder, prefix in places:
        for entry in _entries(folder, prefix):
            try:
                found.append((entry.path, entry.stat(follow_symlinks=False).st_mtime))
            except OSError:
                continue
    return found


def remove_paths(paths: Iterable[str], container: str | None = None) -> list[str]:
    """Remove each path (a folder or a file; blocking): the failures, one line each.

    What this process may not remove (the Runner's root-owned copies) is removed in
    the Runner's ``container`` (same paths inside: the jobs folder is mounted there
    at its own path) when one is named.
    """
    left: list[tuple[str, str]] = []
    for path in paths:
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            left.append((path, exc.strerror or str(exc)))
    if left and container:
        still = _exec_remove(container, [path for path, _ in left])
        left = [(path, why) for path, why in left if path in still]
    return [f"{path}: {why}" for path, why in left]


def _exec_remove(container: str, paths: list[str]) -> set[str]:
    """``docker exec CONTAINER rm -rf -- PATHS`` (blocking): the paths still there."""
    try:
        from .docker_steps import docker_client

        client = docker_client()
        try:
            client.containers.get(container).exec_run(["rm", "-rf", "--", *paths])
        finally:
            client.close()
    except Exception:  # no SDK, no engine, no such container: the next prune tries again
        pass
    return {path for path in paths if os.path.lexists(path)}


def prune_job_folders(
    jobs_dir: str, max_age_sec: float = JOBS_MAX_AGE_SEC, container: str | None = None
) -> tuple[int, list[str]]:
    """Remove what the Runner kept under ``jobs_dir`` longer than ``max_age_sec``
    (blocking): (count removed, failures)."""
    if not os.path.isdir(jobs_dir):
        return 0, []
    cutoff = time.time() - max_age_sec
    old = [path for path, mtime in kept_paths(jobs_dir) if mtime < cutoff]
    failed = remove_paths(old, container)
    return len(old) - len(failed), failed


def _holds(path: str, wanted: bytes, *, exactly: bool) -> bool:
    """True when the file at ``path`` is ``wanted`` (``exactly``) or contains it."""
    try:
        if exactly and os.path.getsize(path) != len(wanted):
            return False
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return False
    return data == wanted if exactly else wanted in data


def _made_by(folder: str, prefix: str, since: float, match: Callable[[str], bool]) -> str | None:
    """The one ``prefix*`` folder in ``folder`` made since ``since`` (a wall-clock time)
    for which ``match(path)`` holds, else None (none, or several)."""
    found: list[str] = []
    for entry in _entries(folder, prefix):
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_mtime < since - 1:
                continue
        except OSError:
            continue
        if match(entry.path):
            found.append(entry.path)
    return found[0] if len(found) == 1 else None


def run_folder(jobs_dir: str, filename: str, code: str, since: float) -> str | None:
    """The job folder of the run that wrote ``code`` as ``ws/<filename>`` (blocking).

    Only folders made at or after ``since`` count, and only when exactly one matches:
    two runs of the same code at once leave both to :func:`prune_job_folders`, as a
    folder of a run under way must never go.
    """
    wanted = code.encode("utf-8")
    return _made_by(
        jobs_dir,
        "job-",
        since,
        lambda job: _holds(os.path.join(job, "ws", filename), wanted, exactly=True),
    )


def run_seed(state: str, filename: str, code: str, since: float, marker: str) -> str | None:
    """The Runner's seed of one run: the ``/code/run`` one whose ``script.sh`` (our
    wrapper) holds the run's own ``marker``, or the ``/run`` one holding ``code`` as
    ``filename``; as :func:`run_folder`, only one that cannot be another run's."""
    wanted, mark = code.encode("utf-8"), marker.encode("utf-8")

    def match(seed: str) -> bool:
        if mark and _holds(os.path.join(seed, CODE_RUN_SCRIPT), mark, exactly=False):
            return True
        return _holds(os.path.join(seed, filename), wanted, exactly=True)

    return _made_by(os.path.join(state, "seeds"), "seed_", since, match)


def run_copies(
    jobs_dir: str,
    filename: str,
    code: str,
    since: float,
    *,
    sandbox_id: str | None = None,
    marker: str = "",
) -> list[str]:
    """What the Runner kept of one run under ``jobs_dir``: its job folder, its seed, its
    record (by ``sandbox_id``), those it can tell apart (blocking)."""
    state = state_path(jobs_dir)
    copies = [
        run_folder(jobs_dir, filename, code, since),
        run_seed(state, filename, code, since, marker),
    ]
    if sandbox_id and os.path.basename(sandbox_id) == sandbox_id and sandbox_id not in (".", ".."):
        copies.append(os.path.join(state, "runs", sandbox_id))
    return [path for path in copies if path is not None and os.path.lexists(path)]


def forget_run(
    jobs_dir: str,
    filename: str,
    code: str,
    since: float,
    *,
    ran: bool,
    sandbox_id: str | None = None,
    marker: str = "",
    container: str | None = None,
) -> None:
    """After a run: remove its own copies (when the Runner ran it), then the old ones.

    Blocking. What cannot be removed stays for the next prune; nothing here fails a run.
    """
    if ran:
        found = run_copies(jobs_dir, filename, code, since, sandbox_id=sandbox_id, marker=marker)
        remove_paths(found, container)
    prune_job_folders(jobs_dir, container=container)
