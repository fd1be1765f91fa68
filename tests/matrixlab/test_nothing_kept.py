"""Nothing is kept on the Runner's host: the backend removes each run's job folder
(where the lifecycle owns the jobs folder), and caps the workspace a file run sends."""

from __future__ import annotations

import asyncio
import os
import time
import tracemalloc
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.errors import InvalidRequest
from gitpilot_jupyter.sandbox.matrixlab.backend import MatrixLabSandbox
from gitpilot_jupyter.sandbox.matrixlab.config import (
    JOBS_MAX_AGE_SEC,
    KEPT_NOTE,
    STATE_ENV,
    LifecycleConfig,
    state_path,
    url_port,
)
from gitpilot_jupyter.sandbox.report import status_text
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.matrixlab.conftest import sent_requests
from tests.support.runs import run_here
from tests.support.standin_fixture import StandinRunner, StartStandin

SECRET = "planted-secret-0d9f"


@pytest.fixture
def jobs_runner(
    start_standin: StartStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[StandinRunner, Path]:
    """A stand-in that keeps a job folder per run under a jobs folder and its own copies
    in its state folder, as the real Runner does started by the lifecycle."""
    jobs = tmp_path / "jobs"
    monkeypatch.setenv("MATRIXLAB_LOCAL_JOBS_DIR", str(jobs))
    monkeypatch.setenv(STATE_ENV, state_path(str(jobs)))
    return start_standin(token="t"), jobs


def folders(jobs: Path) -> list[Path]:
    return sorted(jobs.glob("job-*"))


def copies(jobs: Path) -> list[Path]:
    """The Runner's own copies in its state folder: seeds, run records, uploads."""
    state = Path(state_path(str(jobs)))
    return sorted(p for sub in ("seeds", "runs", "uploads") for p in state.glob(f"{sub}/*"))


def holding(paths: list[Path], secret: str) -> list[Path]:
    """Those of ``paths`` with a file that holds ``secret``."""
    found = []
    for path in paths:
        files = [path] if path.is_file() else [f for f in path.rglob("*") if f.is_file()]
        if any(secret in f.read_text(errors="replace") for f in files):
            found.append(path)
    return found


async def test_the_runners_own_copies_of_a_run_are_removed_after_it(
    jobs_runner: tuple[StandinRunner, Path],
) -> None:
    runner, jobs = jobs_runner
    code = f"import sys; print({SECRET!r}, sys.stdin.read())"
    keeping = MatrixLabSandbox(url=runner.url, token="t")
    stdin = "stdin-secret-77"
    await keeping.run(
        RunRequest(language="python", code=code + " # kept", stdin=stdin, timeout_sec=10)
    )
    # As the real Runner: the code and stdin in a seed, the output in the run's record.
    kept = copies(jobs)
    assert [p.parent.name for p in holding(kept, SECRET)] == ["runs", "seeds"]
    assert [p.parent.name for p in holding(kept, stdin)] == ["runs", "seeds"]
    # An old copy (a run long gone) and a young one (another run's, maybe under way).
    old = Path(state_path(str(jobs))) / "seeds" / "seed_old"
    old.mkdir()
    (old / "main.py").write_text(SECRET)
    long_ago = time.time() - 2 * JOBS_MAX_AGE_SEC
    os.utime(old, (long_ago, long_ago))
    backend = MatrixLabSandbox(url=runner.url, token="t", jobs_dir=str(jobs))
    result = await backend.run(
        RunRequest(language="python", code=code, stdin=stdin, timeout_sec=10)
    )
    assert result.stdout == f"{SECRET} {stdin}\n" and result.sandbox_id
    assert copies(jobs) == kept, "the run's seed or record stayed, or the old seed"
    big = await backend.run(
        RunRequest(language="python", code=code, stdin="x" * 1_200_000, timeout_sec=10)
    )
    assert big.exit_code == 0 and sent_requests(runner)[-1]["path"] == "/run"
    assert copies(jobs) == kept


async def test_status_and_plans_say_an_unmanaged_runner_keeps_copies(
    matrixlab_service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    matrixlab_service.settings.update({"backend": "matrixlab"})
    status = await matrixlab_service.status()
    assert status["ok"] is True and status["kept"] == KEPT_NOTE
    assert f"kept             {KEPT_NOTE}" in status_text(status)
    plan, result = await run_here(matrixlab_service, language="python", code="print(1)")
    assert {"label": KEPT_NOTE, "ok": False} in plan.checks and KEPT_NOTE in result.notes
    # Where the lifecycle manages the Runner, the backend removes them: nothing to say.
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    assert (await matrixlab_service.status())["kept"] is None
    plan, _ = await run_here(matrixlab_service, language="python", code="print(2)")
    assert not any("keeps copies" in c["label"] for c in plan.checks)
    # The flag on, but the URL is not where the lifecycle's container answers (another
    # port): that Runner is someone else's, and keeps its copies.
    url = matrixlab_service.settings.effective().settings.matrixlab_url
    monkeypatch.setenv("GITPILOT_MATRIXLAB_PORT", str(url_port(url) % 65535 + 1))
    assert (await matrixlab_service.status())["kept"] == KEPT_NOTE
    plan, result = await run_here(matrixlab_service, language="python", code="print(3)")
    assert {"label": KEPT_NOTE, "ok": False} in plan.checks and KEPT_NOTE in result.notes


async def test_each_run_leaves_no_job_folder(jobs_runner: tuple[StandinRunner, Path]) -> None:
    runner, jobs = jobs_runner
    code = f"open('notes.txt', 'w').write({SECRET!r}); print(open('notes.txt').read())"
    keeping = MatrixLabSandbox(url=runner.url, token="t")
    await keeping.run(RunRequest(language="python", code=code + " # kept", timeout_sec=10))
    kept = folders(jobs)
    assert len(kept) == 1 and SECRET in (kept[0] / "ws" / "notes.txt").read_text()
    backend = MatrixLabSandbox(url=runner.url, token="t", jobs_dir=str(jobs))
    result = await backend.run(RunRequest(language="python", code=code, timeout_sec=10))
    assert result.stdout == SECRET + "\n"
    # Its own folder went at once; the older one (another run's, still young) stays.
    assert folders(jobs) == kept
    stdin = "x" * 1_200_000  # beyond /code/run's limit: goes to /run as a zip workspace
    reading = "import sys; print(len(sys.stdin.read()))"
    big = await backend.run(
        RunRequest(language="python", code=reading, stdin=stdin, timeout_sec=10)
    )
    assert big.stdout == "1200000\n" and sent_requests(runner)[-1]["path"] == "/run"
    assert folders(jobs) == kept


async def test_two_runs_of_the_same_code_at_once_never_lose_each_others_folder(
    jobs_runner: tuple[StandinRunner, Path],
) -> None:
    runner, jobs = jobs_runner
    backend = MatrixLabSandbox(url=runner.url, token="t", jobs_dir=str(jobs))
    code = "import time; time.sleep(0.5); print('done')"
    request = RunRequest(language="python", code=code, timeout_sec=10)
    results = await asyncio.gather(backend.run(request), backend.run(request))
    # Neither run could tell which folder was its own: both ran to the end, and the
    # folders stay for the prune by age rather than risk one of a run under way.
    assert [r.stdout for r in results] == ["done\n", "done\n"]
    assert len(folders(jobs)) == 2


async def test_the_workspace_cap_refuses_a_large_folder_before_sending(
    runner_standin: StandinRunner, sandbox_config_dir: Path, tmp_path: Path
) -> None:
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir),
        root_dir=tmp_path,
        lifecycle_config=LifecycleConfig(max_workspace_mb=1),
    )
    service.settings.update(
        {"matrixlab_url": runner_standin.url, "matrixlab_token": runner_standin.token}
    )
    (tmp_path / "data.bin").write_bytes(b"\0" * (2 * 1024 * 1024))
    (tmp_path / "job.py").write_text("print('never')\n")
    before = len(sent_requests(runner_standin))
    with pytest.raises(InvalidRequest) as refused:
        await run_here(service, file="job.py", backend="matrixlab")
    assert "more than 1 MiB" in refused.value.message
    assert "matrixlab_max_workspace_mb" in refused.value.message
    assert len(sent_requests(runner_standin)) == before, "something was sent"


async def test_a_large_file_run_is_streamed_not_held_in_memory(
    runner_standin: StandinRunner, tmp_path: Path
) -> None:
    size = 30 * 1024 * 1024
    (tmp_path / "data.bin").write_bytes(os.urandom(size))  # incompressible
    script = tmp_path / "job.py"
    script.write_text("import os; print(os.path.getsize('data.bin'))\n")
    backend = MatrixLabSandbox(url=runner_standin.url, token=runner_standin.token)
    request = RunRequest(language="python", code=script.read_text(), timeout_sec=30, file=script)
    tracemalloc.start()
    try:
        result = await backend.run(request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0 and result.stdout == f"{size}\n", result.stderr
    # Held at once: a chunk of the zip and its base64, not the 30 MiB workspace (the
    # whole body, zip + base64 + JSON, was about 5 times the folder before).
    assert peak < 8 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB for a {size / 1e6:.0f} MB folder"
