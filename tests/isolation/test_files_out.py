"""Files out: what a snippet leaves under ``out/`` comes back, on every engine, cold and warm.

Real runs: each snippet writes into its run folder's ``out/``, and the result lists
what was collected (name, size, sha256) while the bytes land in the folder the
request named. The hostile ones: a symlink to ``/etc/shadow``, a symlinked folder,
``out/`` itself swapped for a symlink, a FIFO, a file over the byte cap, more files
than the count cap, and a run killed on its timeout.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local.backends import NullSandbox, SubprocessSandbox
from gitpilot_jupyter.sandbox.local.outfiles import stored_name
from gitpilot_jupyter.sandbox.local.pool import PoolConfig
from gitpilot_jupyter.sandbox.outfiles import OutCaps
from gitpilot_jupyter.sandbox.results import RunResult

from .conftest import SMALL, make_backend
from .pooling import pooled
from .test_pool_landlock import walled_pool

ENGINES = ["bwrap", "landlock", "none"]
PATH_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}

WRITE_CHART = """
import os
os.makedirs("out/plots", exist_ok=True)
with open("out/chart.csv", "w") as f:
    f.write("month,sales\\n1,10\\n2,12\\n")
with open("out/plots/a.bin", "wb") as f:
    f.write(bytes(range(256)) * 4)
print(sorted(os.listdir("out")))
"""


def cold(engine: str) -> SubprocessSandbox:
    """A backend of ``engine`` whose runs start cold (no pool)."""
    if engine == "off":
        return NullSandbox(pool=PoolConfig(mode="off"))
    backend = make_backend(engine)
    backend.pool_config = PoolConfig(mode="off")
    return backend


def run_out(
    backend: SubprocessSandbox,
    code: str,
    dest: Path,
    *,
    caps: OutCaps | None = None,
    timeout_sec: int = 20,
    limits: ResourceLimits = SMALL,
) -> RunResult:
    dest.mkdir(mode=0o700, exist_ok=True)
    request = RunRequest(
        language="python",
        code=code,
        timeout_sec=timeout_sec,
        limits=limits,
        env=dict(PATH_ENV),
        out_dir=dest,
        out_caps=caps or OutCaps(),
    )

    async def go() -> RunResult:
        try:
            return await backend.run(request)
        finally:
            await backend.aclose()

    return asyncio.run(go())


def kept(result: RunResult, dest: Path) -> dict[str, bytes]:
    """name -> bytes of what ``result`` lists, read from where the backend copied them,
    each checked against its listed size and sha256."""
    out = {}
    for index, entry in enumerate(result.files):
        data = (dest / stored_name(index)).read_bytes()
        assert entry["size"] == len(data)
        assert entry["sha256"] == "sha256:" + hashlib.sha256(data).hexdigest()
        out[entry["name"]] = data
    assert sorted(p.name for p in dest.iterdir()) == [stored_name(i) for i in range(len(out))]
    return out


@pytest.mark.parametrize("engine", [*ENGINES, "off"])
def test_a_snippets_out_files_come_back(engine: str, tmp_path: Path) -> None:
    result = run_out(cold(engine), WRITE_CHART, tmp_path / "kept")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "['chart.csv', 'plots']\n"
    files = kept(result, tmp_path / "kept")
    assert files == {
        "chart.csv": b"month,sales\n1,10\n2,12\n",
        "plots/a.bin": bytes(range(256)) * 4,
    }
    assert result.notes == []


@pytest.mark.parametrize("engine", ["bwrap", "landlock"])
def test_a_warm_runs_out_files_come_back(engine: str, tmp_path: Path) -> None:
    backend = pooled("always") if engine == "bwrap" else walled_pool("always")
    result = run_out(backend, WRITE_CHART, tmp_path / "kept")
    assert result.warm and result.exit_code == 0, result.stderr
    assert set(kept(result, tmp_path / "kept")) == {"chart.csv", "plots/a.bin"}


@pytest.mark.parametrize("engine", ["bwrap", "landlock"])
def test_out_starts_empty_and_nothing_comes_back_unasked(engine: str, tmp_path: Path) -> None:
    backend = cold(engine)
    code = "import os\nprint(os.listdir('out'), oct(os.stat('out').st_mode & 0o777))"
    first = run_out(backend, code + "\nopen('out/x', 'w').write('x')", tmp_path / "a")
    assert first.stdout.startswith("[] "), first.stderr
    again = run_out(cold(engine), code, tmp_path / "b")
    assert again.stdout.startswith("[] ") and again.files == []


@pytest.mark.parametrize("engine", ENGINES)
def test_symlinks_are_not_followed(engine: str, tmp_path: Path) -> None:
    code = """
import os
os.symlink("/etc/shadow", "out/shadow")
os.symlink("/etc", "out/etc")
os.symlink("../../../../etc/passwd", "out/passwd")
open("out/ok.txt", "w").write("ok")
"""
    result = run_out(cold(engine), code, tmp_path / "kept")
    assert result.exit_code == 0, result.stderr
    assert kept(result, tmp_path / "kept") == {"ok.txt": b"ok"}
    (note,) = result.notes
    assert "not a regular file (symlink (not followed))" in note
    for name in ("out/shadow", "out/etc", "out/passwd"):
        assert name in note


def test_an_out_folder_swapped_for_a_symlink_is_not_followed(tmp_path: Path) -> None:
    # landlock and none: out/ is a folder of the run's own, which it may replace (under
    # bubblewrap it is a mount point: it cannot).
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "key").write_text("do not copy")
    code = f"import os, shutil\nshutil.rmtree('out')\nos.symlink({str(secret)!r}, 'out')"
    result = run_out(cold("none"), code, tmp_path / "kept")
    assert result.exit_code == 0, result.stderr
    assert result.files == [] and list((tmp_path / "kept").iterdir()) == []
    assert result.notes == ["out/ is not a folder (a symlink is not followed): nothing kept"]


def test_bubblewraps_out_cannot_be_swapped(tmp_path: Path) -> None:
    code = "import os\ntry:\n    os.rmdir('out')\nexcept OSError as e:\n    print(e.errno)"
    result = run_out(cold("bwrap"), code, tmp_path / "kept")
    assert result.stdout == "16\n", result.stderr  # EBUSY: a mount point


@pytest.mark.parametrize("engine", ["bwrap", "none"])
def test_a_fifo_is_skipped_without_blocking(engine: str, tmp_path: Path) -> None:
    code = "import os\nos.mkfifo('out/pipe')\nopen('out/after.txt', 'w').write('1')"
    started = time.monotonic()
    result = run_out(cold(engine), code, tmp_path / "kept")
    assert time.monotonic() - started < 15
    assert kept(result, tmp_path / "kept") == {"after.txt": b"1"}
    assert result.notes == ["out/: left out out/pipe: not a regular file (FIFO)"]


@pytest.mark.parametrize("engine", ["bwrap", "landlock"])
def test_a_timed_out_run_keeps_what_it_wrote(engine: str, tmp_path: Path) -> None:
    code = (
        "import time\nwith open('out/partial.txt', 'w') as f:\n    f.write('so far')\n"
        "print('written', flush=True)\ntime.sleep(60)"
    )
    result = run_out(cold(engine), code, tmp_path / "kept", timeout_sec=2)
    assert result.timed_out and result.stdout == "written\n", result.stderr
    assert kept(result, tmp_path / "kept") == {"partial.txt": b"so far"}


def test_a_stopped_warm_run_keeps_what_it_wrote(tmp_path: Path) -> None:
    backend = pooled("always")
    code = "open('out/partial.txt', 'w').write('so far')\nimport time\ntime.sleep(60)"
    result = run_out(backend, code, tmp_path / "kept", timeout_sec=2)
    assert result.warm and result.timed_out
    assert kept(result, tmp_path / "kept") == {"partial.txt": b"so far"}


@pytest.mark.parametrize("engine", ["bwrap", "none"])
def test_the_byte_cap_leaves_a_file_out(engine: str, tmp_path: Path) -> None:
    code = "open('out/big.bin', 'wb').write(b'x' * 5000)\nopen('out/small.txt', 'w').write('s')"
    result = run_out(cold(engine), code, tmp_path / "kept", caps=OutCaps(10, 4096))
    assert kept(result, tmp_path / "kept") == {"small.txt": b"s"}
    assert result.notes == [
        "out/: left out out/big.bin: over the cap of 4 KiB in all (4 KiB were left)"
    ]


def test_many_tiny_files_stop_at_the_count_cap(tmp_path: Path) -> None:
    code = (
        "import os\nfor i in range(100_000):\n"
        "    with open(f'out/f{i}', 'wb') as f:\n        f.write(b'.')\nprint('done')"
    )
    # 100,000 files need more inodes than the default cap of the writable space, and a
    # page of memory each (the tmpfs is charged to the run's memory).
    limits = ResourceLimits(memory_mb=1024, max_processes=32, max_file_size_mb=8, disk_mb=2048)
    result = run_out(cold("bwrap"), code, tmp_path / "kept", timeout_sec=120, limits=limits)
    assert result.stdout == "done\n", result.stderr
    assert len(result.files) == 1000
    assert result.notes == ["out/: stopped at the cap of 1000 files: the rest was left out"]
    assert len(list((tmp_path / "kept").iterdir())) == 1000


def test_a_100_mb_image_in_out_is_left_out_at_the_default_cap(tmp_path: Path) -> None:
    """The issue's 100 MB image, as a file: over the default 64 MiB of out/ (the caps in
    force when nobody changed them), said in one note; the small file beside it comes back."""
    code = (
        "with open('out/huge.png', 'wb') as f:\n"
        "    f.write(b'\\x89PNG\\r\\n\\x1a\\n')\n"
        "    for _ in range(100):\n"
        "        f.write(bytes(1024 * 1024))\n"
        "open('out/small.txt', 'w').write('s')\n"
    )
    limits = ResourceLimits(memory_mb=1024, max_processes=32, max_file_size_mb=128, disk_mb=512)
    result = run_out(cold("bwrap"), code, tmp_path / "kept", limits=limits)
    assert result.exit_code == 0, result.stderr
    assert kept(result, tmp_path / "kept") == {"small.txt": b"s"}
    assert result.notes == [
        "out/: left out out/huge.png: over the cap of 64 MiB in all (64 MiB were left)"
    ]
