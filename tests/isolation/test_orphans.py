"""What a server killed without cleanup leaves behind, the next server removes.

A SIGKILL (or the OOM killer) gives a server no chance to close its pool or finish
its runs. Bubblewrap's ``--die-with-parent`` ends their processes, but their run
folders (holding the snippet and the slot's FIFO) and run cgroups stay. Each run
folder names a lock file its server holds (``flock``) as long as it lives, and each
run cgroup its server's pid and start time, so the next server removes those of
servers that are gone, and only those: even when another process has the pid now,
and even from another pid namespace sharing the temp dir (where pids name other
processes, or none).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.local import cgroups
from gitpilot_jupyter.sandbox.local.cgroups import run_prefix
from gitpilot_jupyter.sandbox.local.cleanup import (
    OUT_STORE_PREFIX,
    OWNER_FILE,
    RUN_DIR_PREFIX,
    SERVER_LOCK_PREFIX,
    server_lock,
)
from gitpilot_jupyter.sandbox.local.pool import POOL_ENV
from tests.support.live_server import LiveServer, start_live_server
from tests.support.system import require_system

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
    """A server with a warm pool whose temp dir is ``tmp`` (made when missing)."""
    tmp.mkdir(exist_ok=True)
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


def _run_and_wait_for_a_slot(http: Any) -> None:
    """One run, then a slot waiting (with its run folder and cgroup) for the next."""
    assert rest_run(http, "print(6 * 7)")["stdout"] == "42\n"
    _wait_for("a slot waiting", lambda: http.get("/api/sandbox/status").json()["pool"]["idle"] >= 1)


def test_the_next_server_removes_what_a_killed_one_left(tmp_path: Path) -> None:
    require_mechanism("bwrap")
    tmp = tmp_path / "tmp"
    first = _start(tmp_path / "first", tmp)
    try:
        with first.client() as http:
            _run_and_wait_for_a_slot(http)
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
    (alive / OWNER_FILE).write_text(f"{server_lock(str(tmp))} pid={os.getpid()}\n")
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


#: A process that makes one run folder, says where, and lives until its stdin closes.
_MAKE_ONE = (
    "import sys\n"
    "from gitpilot_jupyter.sandbox.local.cleanup import make_run_dir\n"
    "print(make_run_dir(), flush=True)\n"
    "sys.stdin.read()\n"
)
#: What a server starting does first: sweep the temp dir; prints how many folders went.
_SWEEP = (
    "from gitpilot_jupyter.sandbox.local.cleanup import remove_orphaned_run_dirs\n"
    "print(remove_orphaned_run_dirs())\n"
)


def _new_pid_namespace() -> list[str]:
    """The command prefix that runs a process in a pid namespace of its own (its /proc too)."""
    require_system("unshare", shutil.which("unshare") is not None, "util-linux unshare missing")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--pid", "--fork", "--mount-proc"]


def _env(tmp: Path) -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])
    return {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": root}


def _maker(tmp: Path, prefix: list[str]) -> tuple[subprocess.Popen[str], Path]:
    process = subprocess.Popen(
        [*prefix, sys.executable, "-c", _MAKE_ONE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=_env(tmp),
    )
    assert process.stdout is not None
    folder = Path(process.stdout.readline().strip())
    assert folder.parent == tmp and (folder / OWNER_FILE).is_file(), folder
    return process, folder


def _sweep(tmp: Path, prefix: list[str]) -> int:
    done = subprocess.run(
        [*prefix, sys.executable, "-c", _SWEEP],
        capture_output=True,
        text=True,
        env=_env(tmp),
        timeout=60,
        check=True,
    )
    return int(done.stdout.strip())


def _kill_namespace(process: subprocess.Popen[str]) -> None:
    """SIGKILL the pid namespace ``unshare`` made (its init first: the rest die with it)."""
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    for child in children:
        os.kill(int(child), signal.SIGKILL)
    process.communicate(timeout=15)


def _server_locks(tmp: Path) -> set[str]:
    return {p.name for p in tmp.iterdir() if p.name.startswith(SERVER_LOCK_PREFIX)}


def test_a_sweep_in_another_pid_namespace_leaves_a_live_servers_slot_folders(
    tmp_path: Path,
) -> None:
    require_mechanism("bwrap")
    other = _new_pid_namespace()
    tmp = tmp_path / "tmp"
    first = _start(tmp_path / "first", tmp)
    try:
        with first.client() as http:
            _run_and_wait_for_a_slot(http)
            live = _run_folders(tmp)
            assert live, "the waiting slots have run folders"
            # A server in another pid namespace that was killed left a folder behind.
            gone, dead = _maker(tmp, other)
            _kill_namespace(gone)
            # A second server in yet another pid namespace starts: its sweep.
            assert _sweep(tmp, other) == 1
            assert not dead.exists(), "the dead server's folder is left"
            assert all(folder.is_dir() for folder in live), "a live server's folder went"
            assert len(_server_locks(tmp)) == 1, "the dead server's lock file is left"
            # The first server's slots still work.
            assert rest_run(http, "print(7 * 6)")["stdout"] == "42\n"
        first.process.kill()
        first.process.wait(timeout=15)
    finally:
        first.stop()
    left = {folder for folder in _run_folders(tmp) if (folder / OWNER_FILE).is_file()}
    assert left
    # (And the folder where it kept its runs' out/ files: its run made one.)
    stores = {p for p in tmp.iterdir() if p.name.startswith(OUT_STORE_PREFIX)}
    assert len(stores) == 1
    # Once it is dead (the kernel let go of its lock), the same sweep removes its folders.
    assert _sweep(tmp, other) == len(left) + len(stores)
    assert not _run_folders(tmp) & left
    assert not any(store.exists() for store in stores)
    assert not _server_locks(tmp)


def test_a_live_server_in_another_pid_namespace_keeps_its_folders(tmp_path: Path) -> None:
    other = _new_pid_namespace()
    live, folder = _maker(tmp_path, other)
    try:
        # There, it is pid 1: here, pid 1 is another process (whose start time differs).
        assert "pid=1 " in (folder / OWNER_FILE).read_text()
        assert _sweep(tmp_path, []) == 0
        assert folder.is_dir()
    finally:
        live.communicate(timeout=15)  # a clean exit: its lock file goes, its folder stays
    assert folder.is_dir() and not _server_locks(tmp_path)
    assert _sweep(tmp_path, []) == 1
    assert not folder.exists()
