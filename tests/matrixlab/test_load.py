"""Many runs at once on a busy Runner: queued here, told apart, never falsely failed.

The stand-in's ``busy`` mode plays what Runner 0.1.0 does with 12-16 runs at once:
16 requests handled at once (the rest wait before their handler starts, outside the
run's timeout) and every run in progress adds 0.35 s to a container's start (which
counts in the run's timeout).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.batch import arun_batch, read_results
from gitpilot_jupyter.sandbox.errors import BackendBusy
from gitpilot_jupyter.sandbox.matrixlab import load
from gitpilot_jupyter.sandbox.matrixlab.backend import MatrixLabSandbox
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.service.capacity import CapacityLimits
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.matrixlab.conftest import backend_for, sent_requests
from tests.support.live_server import free_port
from tests.support.standin_fixture import StandinRunner, StartStandin

BUSY = ["--workers", "16", "--start-per-run", "0.35"]
SNIPPETS = 32


def items(n: int = SNIPPETS) -> list[dict[str, Any]]:
    return [{"id": f"s{i}", "language": "python", "code": f"print({i})"} for i in range(n)]


async def run_batch_on(service: SandboxService, out: Path) -> list[dict[str, Any]]:
    """The items all at once (one worker each) on matrixlab, 2 s timeout each."""
    return [
        record
        async for record in arun_batch(
            items(), out=out, workers=SNIPPETS, timeout_sec=2, backend="matrixlab", service=service
        )
    ]


@pytest.fixture
def busy_runner(start_standin: StartStandin) -> StandinRunner:
    return start_standin(mode="busy", token="busy", delay=0.3, args=BUSY)


@pytest.fixture
def busy_service(
    sandbox_config_dir: Path, tmp_path: Path, busy_runner: StandinRunner
) -> SandboxService:
    """A service whose own caps let all the snippets go at once: the backend's per-Runner
    limit is what these tests are about (the server-wide caps are tests/reliability's)."""
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir),
        root_dir=tmp_path,
        capacity=CapacityLimits(max_runs=2 * SNIPPETS, memory_budget_mb=0),
    )
    service.settings.update(
        {"matrixlab_url": busy_runner.url, "matrixlab_token": busy_runner.token}
    )
    return service


def code_runs(runner: StandinRunner) -> int:
    """The snippets the stand-in was sent."""
    return sum(1 for sent in sent_requests(runner) if sent["path"] == "/code/run")


async def test_32_snippets_at_once_each_run_once_with_no_false_failure(
    busy_service: SandboxService, busy_runner: StandinRunner, tmp_path: Path
) -> None:
    out = tmp_path / "results.jsonl"
    records = await run_batch_on(busy_service, out)
    statuses = Counter(record["status"] for record in records)
    assert statuses == {"ok": SNIPPETS}, [r for r in records if r["status"] != "ok"]
    assert sorted(r["stdout"] for r in records) == sorted(f"{i}\n" for i in range(SNIPPETS))
    # Exactly once: one record per item in the file, one run per item on the Runner.
    assert sorted(r["id"] for r in read_results(out)) == sorted(i["id"] for i in items())
    assert code_runs(busy_runner) == SNIPPETS


async def test_without_the_limit_the_busy_runner_fails_runs_and_resume_retries_ours(
    busy_service: SandboxService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the issue saw, reproduced: the limit is what keeps the test above green."""
    monkeypatch.setenv(load.MAX_RUNS_ENV, str(SNIPPETS))
    out = tmp_path / "results.jsonl"
    records = await run_batch_on(busy_service, out)
    failed = Counter((r["status"], r.get("code")) for r in records if r["status"] != "ok")
    assert failed, "the stand-in no longer plays a busy Runner"
    # A run the Runner took and never answered is not "unreachable" (it ran, later)...
    assert ("error", "backend_unreachable") not in failed
    unknown = {r["id"] for r in records if r.get("code") == "run_outcome_unknown"}
    # ...and a rerun does not count it done: with the limit back, it runs again.
    monkeypatch.delenv(load.MAX_RUNS_ENV)
    again = await run_batch_on(busy_service, out)
    assert {r["id"] for r in again} == unknown
    assert all(r["status"] == "ok" for r in again)
    assert sorted(r["id"] for r in read_results(out)) == sorted(i["id"] for i in items())


async def test_an_unreachable_runner_fails_nothing_for_good(
    service: SandboxService, start_standin: StartStandin, tmp_path: Path
) -> None:
    port = free_port()
    service.settings.update({"matrixlab_url": f"http://127.0.0.1:{port}"})
    out = tmp_path / "results.jsonl"
    records = await run_batch_on(service, out)
    assert {(r["status"], r["code"]) for r in records} == {("error", "backend_unreachable")}
    assert read_results(out) == []  # nothing ran: nothing is done
    start_standin(port=port)
    again = await run_batch_on(service, out)
    assert Counter(r["status"] for r in again) == {"ok": SNIPPETS}
    assert len(read_results(out)) == SNIPPETS


def sleeper(timeout: int = 30) -> RunRequest:
    return RunRequest(language="python", code="import time; time.sleep(30)", timeout_sec=timeout)


async def test_a_queued_run_waits_outside_its_timeout_and_can_be_stopped_unsent(
    runner_standin: StandinRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(load.MAX_RUNS_ENV, "1")
    backend = backend_for(runner_standin)
    first = asyncio.ensure_future(backend.run(sleeper()))
    slots = load.RunnerSlots.for_runner(backend.url, 1)
    while slots.active < 1:
        await asyncio.sleep(0.01)
    queued = RunRequest(language="python", code="print('late')", timeout_sec=1)
    queued.stop = asyncio.Event()
    second = asyncio.ensure_future(backend.run(queued))
    while slots.waiting < 1:
        await asyncio.sleep(0.01)
    await asyncio.sleep(1.5)  # longer than its own timeout: the queue is not its time
    assert not second.done()
    queued.stop.set()
    result = await asyncio.wait_for(second, 5)
    assert result.cancelled and result.exit_code == -1 and result.command[0] == "python"
    assert result.sandbox_id is None and code_runs(runner_standin) == 1  # never sent
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    # No container to remove here: the first run goes on on the Runner, and keeps its slot.
    assert (slots.active, slots.waiting) == (1, 0)


async def test_a_queue_past_its_bound_is_busy_with_a_retry_hint(
    runner_standin: StandinRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(load.MAX_RUNS_ENV, "1")
    monkeypatch.setattr(load, "MAX_QUEUED_RUNS", 0)
    backend = backend_for(runner_standin)
    first = asyncio.ensure_future(backend.run(sleeper()))
    while load.RunnerSlots.for_runner(backend.url, 1).active < 1:
        await asyncio.sleep(0.01)
    with pytest.raises(BackendBusy) as caught:
        await backend.run(RunRequest(language="python", code="print(1)", timeout_sec=5))
    assert (caught.value.status, caught.value.code) == (429, "backend_busy")
    assert caught.value.retry_after == load.BUSY_RETRY_SEC
    assert f"retry in {load.BUSY_RETRY_SEC} s" in caught.value.message
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_file_run_freezes_the_runner_and_a_snippet_sent_meanwhile_still_runs(
    runner_standin: StandinRunner, tmp_path: Path
) -> None:
    """Runner 0.1.0 serves /run on its event loop: nothing else is answered meanwhile."""
    (tmp_path / "job.py").write_text("")
    backend = backend_for(runner_standin)
    file_run = RunRequest(
        language="python",
        code="import time\ntime.sleep(7)\nprint('file run')",
        timeout_sec=10,
        file=tmp_path / "job.py",
    )
    frozen = asyncio.ensure_future(backend.run(file_run))
    while not any(sent["path"] == "/run" for sent in sent_requests(runner_standin)):
        await asyncio.sleep(0.05)
    health = await backend.health()  # its 5 s: the Runner answers nothing now
    assert health["ok"] is False and "did not answer" in health["error"]
    # A 1 s snippet (9 s of HTTP wait) waits out the freeze: answered, not "unreachable".
    late = await backend.run(RunRequest(language="python", code="print('late')", timeout_sec=1))
    assert (late.exit_code, late.stdout) == (0, "late\n")
    assert (await frozen).stdout == "file run\n"


def test_the_limit_is_a_setting_with_a_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load.max_runs({}) == load.DEFAULT_MAX_RUNS == 4
    assert load.max_runs({load.MAX_RUNS_ENV: "9"}) == 9
    with pytest.raises(Exception, match="from 1 to 64"):
        load.max_runs({load.MAX_RUNS_ENV: "0"})


def test_a_runner_on_another_host_cannot_be_stopped_and_the_plan_says_so() -> None:
    remote = MatrixLabSandbox(url="http://runner.example:8765", environ={})
    assert remote.limit_notes(ResourceLimits())[-2] == (
        "Stop cannot stop a run on this Runner: it is on another host and not managed "
        "here, so its Docker engine is out of reach"
    )
    managed = MatrixLabSandbox(
        url="http://runner.example:8765",
        environ={"GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE": "1"},
    )
    local = MatrixLabSandbox(url="http://127.0.0.1:8765", environ={})
    for backend in (managed, local):
        assert not any("Stop" in note for note in backend.limit_notes(ResourceLimits()))
