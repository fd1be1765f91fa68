"""The collection of ``out/`` and the service's store of what runs handed back.

The collection is run on real folders here, for what a run cannot stage in its own
time: a file that grows while it is copied (a writer thread), floods of entries of
every kind, deep folders and names that are not UTF-8. The store is the real one,
on its own 0700 folder, with a clock the test moves.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.errors import InvalidRequest, RunFileNotFound
from gitpilot_jupyter.sandbox.local.cleanup import (
    OUT_STORE_PREFIX,
    OWNER_FILE,
    remove_orphaned_run_dirs,
)
from gitpilot_jupyter.sandbox.local.outfiles import (
    Collected,
    collect_run_folder,
    stored_name,
)
from gitpilot_jupyter.sandbox.outfiles import MAX_OUT_DEPTH, OutCaps, check_out_name
from gitpilot_jupyter.sandbox.service.outstore import OutStore


def collect(run: Path, dest: Path, caps: OutCaps | None = None) -> Collected:
    dest.mkdir(exist_ok=True)
    return collect_run_folder(run, dest, caps or OutCaps())


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A run folder with its empty ``out/``."""
    folder = tmp_path / "run"
    (folder / "out").mkdir(parents=True)
    return folder


def test_a_file_that_grows_while_collected_is_cut_at_its_size(run: Path, tmp_path: Path) -> None:
    growing = run / "out" / "log.txt"
    growing.write_bytes(b"a" * 16 * 1024 * 1024)
    stop = threading.Event()

    def append() -> None:
        with growing.open("ab") as f:
            while not stop.is_set():
                f.write(b"b" * 4096)
                f.flush()
                time.sleep(0.0002)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        time.sleep(0.01)  # it is growing before the collection starts, and while it runs
        found = collect(run, tmp_path / "kept", OutCaps(max_bytes=1 << 30))
    finally:
        stop.set()
        writer.join()
    (entry,) = found.files
    kept = (tmp_path / "kept" / stored_name(0)).read_bytes()
    assert entry["size"] == len(kept) and len(kept) < growing.stat().st_size
    assert entry["sha256"] == "sha256:" + hashlib.sha256(kept).hexdigest()
    assert kept == growing.read_bytes()[: len(kept)]  # a prefix of the file, nothing else
    assert found.notes == [
        f"out/: left out out/log.txt: grew while it was collected: kept its first {len(kept)} bytes"
    ]


def test_a_flood_of_entries_of_any_kind_is_cut_short(run: Path, tmp_path: Path) -> None:
    for i in range(1000):
        os.symlink("/etc/shadow", run / "out" / f"s{i}")
        os.mkfifo(run / "out" / f"p{i}")
    started = time.monotonic()
    found = collect(run, tmp_path / "kept", OutCaps(max_files=10))
    assert time.monotonic() - started < 5
    assert found.files == []
    assert found.notes[0] == (
        "out/: stopped after 1010 entries (0 files kept): the rest was not looked at"
    )
    assert len(found.notes) == 3  # one for the symlinks, one for the FIFOs, counted
    assert any("and " in note and "more: not a regular file (FIFO)" in note for note in found.notes)


def test_deep_folders_stop_at_the_depth_cap(run: Path, tmp_path: Path) -> None:
    deep = run / "out"
    for _ in range(MAX_OUT_DEPTH + 3):
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "f").write_text("deep")
    (run / "out" / "top.txt").write_text("top")
    found = collect(run, tmp_path / "kept")
    assert [f["name"] for f in found.files] == ["top.txt"]
    (note,) = found.notes
    assert note.startswith("out/: left out out/d/d/") and note.endswith(
        f"deeper than {MAX_OUT_DEPTH} folders"
    )


def test_a_name_that_is_not_utf8_is_left_out(run: Path, tmp_path: Path) -> None:
    os.close(os.open(os.path.join(os.fsencode(run / "out"), b"bad\xff.txt"), os.O_CREAT, 0o600))
    (run / "out" / "good.txt").write_text("g")
    found = collect(run, tmp_path / "kept")
    assert [f["name"] for f in found.files] == ["good.txt"]
    assert found.notes == ["out/: left out out/bad\ufffd.txt: the name is not UTF-8"]


def test_a_missing_out_folder_is_no_error(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    found = collect(tmp_path / "run", tmp_path / "kept")
    assert (found.files, found.notes) == ([], [])


@pytest.mark.parametrize("count", [100, 1500])
def test_the_collection_time(count: int, run: Path, tmp_path: Path) -> None:
    # 100 files of 10 kB, and more tiny files than the cap (tests/isolation has 100,000).
    data = b"x" * (10_000 if count == 100 else 1)
    for i in range(count):
        (run / "out" / f"f{i}").write_bytes(data)
    started = time.monotonic()
    found = collect(run, tmp_path / "kept")
    took = time.monotonic() - started
    assert len(found.files) == min(count, 1000)
    print(f"\ncollection of {count} files: {took * 1000:.1f} ms")
    assert took < 5


def test_names_a_caller_gives_are_checked() -> None:
    assert check_out_name("plots/a.png") == "plots/a.png"
    for bad in ("", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a\\b", "a\x00", 7):
        with pytest.raises(InvalidRequest):
            check_out_name(bad)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def keep(store: OutStore, run_id: str, owner: str | None, files: dict[str, bytes]) -> Path:
    folder = store.folder(run_id)
    listed = []
    for index, (name, data) in enumerate(files.items()):
        (folder / stored_name(index)).write_bytes(data)
        listed.append({"name": name, "size": len(data), "sha256": "sha256:"})
    store.keep(run_id, owner, listed, folder)  # type: ignore[arg-type]
    return folder


def test_the_store_gives_a_runs_files_to_its_owner_only() -> None:
    store = OutStore()
    try:
        folder = keep(store, "run_1", "alice", {"chart.csv": b"a,b"})
        assert stat.S_IMODE(folder.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert store.read("run_1", "chart.csv", "alice") == b"a,b"
        assert store.read("run_1", "chart.csv", None) == b"a,b"  # the shared principal
        for who, name in (("bob", "chart.csv"), ("alice", "other.csv")):
            with pytest.raises(RunFileNotFound):
                store.read("run_1", name, who)
        with pytest.raises(RunFileNotFound):
            store.read("run_2", "chart.csv", "alice")
        with pytest.raises(InvalidRequest):
            store.read("run_1", "../chart.csv", "alice")
    finally:
        store.close()
    assert not folder.parent.exists()


def test_a_killed_servers_store_is_swept_by_the_next(tmp_path: Path) -> None:
    # The store is made by a process that is then killed (SIGKILL: no clean-up of its own).
    code = (
        "import os, sys\nfrom gitpilot_jupyter.sandbox.service.outstore import OutStore\n"
        "store = OutStore()\nfolder = store.folder('run_1')\n"
        "(folder / '000000').write_bytes(b'x')\n"
        "print(folder.parent, flush=True)\nos.kill(os.getpid(), 9)"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    left = Path(done.stdout.strip())
    assert left.parent == tmp_path and left.name.startswith(OUT_STORE_PREFIX), done.stderr
    assert (left / OWNER_FILE).is_file()
    assert remove_orphaned_run_dirs(str(tmp_path)) == 1
    assert not left.exists()


def test_the_store_forgets_after_its_time_and_past_its_total() -> None:
    clock = Clock()
    store = OutStore(ttl_sec=60, max_bytes=10, clock=clock)
    try:
        first = keep(store, "run_1", None, {"a": b"12345"})
        keep(store, "run_2", None, {"b": b"12345"})
        assert store.read("run_1", "a", None) == b"12345"
        keep(store, "run_3", None, {"c": b"1"})  # 11 bytes: the oldest goes
        assert not first.exists()
        with pytest.raises(RunFileNotFound):
            store.read("run_1", "a", None)
        clock.now += 61
        with pytest.raises(RunFileNotFound):
            store.read("run_2", "b", None)
        empty = store.folder("run_4")
        store.keep("run_4", None, [], empty)  # nothing handed back: no folder kept
        assert not empty.exists()
    finally:
        store.close()
