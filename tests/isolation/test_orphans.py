"""What a server killed without cleanup leaves behind, the next server removes.

A SIGKILL (or the OOM killer) gives a server no chance to close its pool or finish
its runs. Bubblewrap's ``--die-with-parent`` ends their processes, but their run
folders (holding the snippet and the slot's FIFO) and run cgroups stay. Each run
folder and each run cgroup carries its server's pid and start time, so the next
server removes those of servers that are gone, and only those, even when another
process has the pid now.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from gitpilot_jupyter.sandbox.local import cgroups
from gitpilot_jupyter.sandbox.local.cgroups import run_prefix
from gitpilot_jupyter.sandbox.local.cleanup import OWNER_FILE, RUN_DIR_PREFIX, start_time
from gitpilot_jupyter.sandbox.local.pool import POOL_ENV
from tests.support.live_server import LiveServer, start_live_server

from .conftest import require_mechanism
from .pooling import rest_run


def _run_folders(tmp: Path) -> set[Path]:
    return {p for p in tmp.iterdir() if p.name.startswith(RUN_DIR_PREFIX)}


def _parents() -> list[Path]:
    # Not layered._cgroup_tree: its first call in a process removes orphans, the very
    # cgroups this test looks for (an earlier version of it found none and passed).
    tree, _ = cgroups.detect()
    found = {tree.memory_parent, tree.pids_parent} if tree is not None else set()
    return [parent for parent in found if parent is not None]


def _run_cgroups(prefix: str) -> list[Path]:
    return [c for parent in _parents() for c in parent.glob(f"{prefix}*")]


def _start(workdir: Path, tmp: Path) -> LiveServer:
    return start_live_server(
        workdir,
        env={POOL_ENV: "", "TMPDIR": str(tmp)},
        args=["--SandboxApp.pool=auto", "--SandboxApp.pool_max_slots=3"],
    )


def _wait_for(what: str, done: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_the_next_server_removes_what_a_killed_one_left(tmp_path: Path) -> None:
    require_mechanism("bwrap")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    first = _start(tmp_path / "first", tmp)
    try:
        with first.client() as http:
            assert rest_run(http, "print(6 * 7)")["stdout"] == "42\n"
            _wait_for(
                "a slot waiting",
                lambda: http.get("/api/sandbox/status").json()["pool"]["idle"] >= 1,
            )
        first_prefix = run_prefix(first.pid)
        assert _run_folders(tmp), "the waiting slots have run folders"
        first.process.kill()
        first.process.wait(timeout=15)
    finally:
        first.stop()
    # What it left, read once it is dead: its pool may have made a slot's folder while it
    # was being killed (seen on a loaded machine), and each folder it made holds its mark.
    left = {folder for folder in _run_folders(tmp) if (folder / OWNER_FILE).is_file()}
    assert left, "the killed server's run folders are marked as its own"
    left_cgroups = _run_cgroups(first_prefix)
    assert left_cgroups, "the waiting slots have run cgroups"
    # Its sandboxes die with it, but nothing removes their folders and cgroups.
    _wait_for(
        "the killed server's sandboxes ended",
        lambda: all(not (c / "cgroup.procs").read_text().strip() for c in left_cgroups),
    )
    assert _run_folders(tmp) >= left

    # Not a run folder of a server that is gone: no owner mark, and a live process's.
    unmarked = tmp / f"{RUN_DIR_PREFIX}unmarked"
    unmarked.mkdir()
    alive = tmp / f"{RUN_DIR_PREFIX}alive"
    alive.mkdir()
    (alive / OWNER_FILE).write_text(f"{os.getpid()} {start_time(os.getpid())}\n")
    # Run cgroups by their names: of a server that had this (live) process's pid before it,
    # of this process, and of an older version (pid only) whose server is gone.
    parent = _parents()[0]
    reused = parent / f"gitpilot-run-{os.getpid()}-1-0123456789ab"
    live = parent / f"{run_prefix()}0123456789ab"
    older = parent / f"gitpilot-run-{first.pid}-0123456789ab"
    for folder in (reused, live, older):
        folder.mkdir()

    second = _start(tmp_path / "second", tmp)
    try:
        with second.client() as http:
            assert rest_run(http, "print(6 * 7)")["stdout"] == "42\n"
        _wait_for("the killed server's folders removed", lambda: not (_run_folders(tmp) & left))
        assert not [c for c in _run_cgroups(first_prefix) if c.exists()], "its cgroups are left"
        assert not reused.exists(), "a cgroup of a server whose pid is in use again is left"
        assert not older.exists()
        assert unmarked.is_dir() and alive.is_dir() and live.is_dir()
        # The new server's own (its waiting slots) are its own business.
        assert _run_cgroups(run_prefix(second.pid))
    finally:
        second.stop()
        for folder in (reused, live, older):
            with contextlib.suppress(FileNotFoundError):
                folder.rmdir()
