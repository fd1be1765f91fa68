"""What a server killed without cleanup leaves behind, the next server removes.

A SIGKILL (or the OOM killer) gives a server no chance to close its pool or finish
its runs. Bubblewrap's ``--die-with-parent`` ends their processes, but their run
folders (holding the snippet and the slot's FIFO) and run cgroups stay. Each run
folder carries its server's pid and start time, and each run cgroup its pid, so
the next server removes those of servers that are gone, and only those.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gitpilot_jupyter.sandbox.local.cleanup import OWNER_FILE, RUN_DIR_PREFIX
from gitpilot_jupyter.sandbox.local.layered import _cgroup_tree
from gitpilot_jupyter.sandbox.local.pool import POOL_ENV
from tests.support.live_server import LiveServer, start_live_server

from .conftest import require_mechanism
from .test_pool import rest_run


def _run_folders(tmp: Path) -> set[Path]:
    return {p for p in tmp.iterdir() if p.name.startswith(RUN_DIR_PREFIX)}


def _run_cgroups(pid: int) -> list[Path]:
    tree, _ = _cgroup_tree()
    parents = {tree.memory_parent, tree.pids_parent} - {None} if tree is not None else set()
    return [
        c for parent in parents if parent is not None for c in parent.glob(f"gitpilot-run-{pid}-*")
    ]


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
        left = _run_folders(tmp)
        assert left, "the waiting slots have run folders"
        assert all((folder / OWNER_FILE).is_file() for folder in left)
        first.process.kill()
        first.process.wait(timeout=15)
    finally:
        first.stop()
    cgroups = _run_cgroups(first.pid)
    # Its sandboxes die with it, but nothing removes their folders and cgroups.
    _wait_for(
        "the killed server's sandboxes ended",
        lambda: all(not (c / "cgroup.procs").read_text().strip() for c in cgroups),
    )
    assert _run_folders(tmp) == left

    # Not a run folder of a server that is gone: no owner mark, and a live process's.
    unmarked = tmp / f"{RUN_DIR_PREFIX}unmarked"
    unmarked.mkdir()
    alive = tmp / f"{RUN_DIR_PREFIX}alive"
    alive.mkdir()
    own_start = Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19]
    (alive / OWNER_FILE).write_text(f"{os.getpid()} {own_start}\n")

    second = _start(tmp_path / "second", tmp)
    try:
        with second.client() as http:
            assert rest_run(http, "print(6 * 7)")["stdout"] == "42\n"
        _wait_for("the killed server's folders removed", lambda: not (_run_folders(tmp) & left))
        assert not [c for c in _run_cgroups(first.pid) if c.exists()], "its cgroups are left"
        assert unmarked.is_dir() and alive.is_dir()
        # The new server's own (its waiting slots) are its own business.
        assert _run_cgroups(second.pid)
    finally:
        second.stop()
