"""Running a batch on this machine: results appended as items finish, resume, stop, policy."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.batch import BatchService, items_from_list, read_results, run_batch
from gitpilot_jupyter.sandbox.batch.runner import counted_over_file, held_records
from gitpilot_jupyter.sandbox.policy import ENV_ALLOWLIST_ENV
from gitpilot_jupyter.sandbox.service import SandboxService


def snippets(n: int, code: str = "print({i})") -> list[dict[str, Any]]:
    return [{"id": f"s{i}", "language": "python", "code": code.format(i=i)} for i in range(n)]


def ids(path: Path) -> list[str]:
    return [r["id"] for r in read_results(path)]


def test_results_are_appended_and_a_rerun_resumes(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    first = list(run_batch(snippets(6), out=out, workers=3))
    assert sorted(ids(out)) == sorted(r["id"] for r in first) == [f"s{i}" for i in range(6)]
    # Same command again: nothing runs, nothing is added.
    assert list(run_batch(snippets(6), out=out)) == []
    # Two more items and one changed item: only those run; each id appears once.
    changed = snippets(8)
    changed[2]["code"] = "print('two')"
    again = list(run_batch(changed, out=out))
    assert sorted(r["id"] for r in again) == ["s2", "s6", "s7"]
    records = {r["id"]: r for r in read_results(out)}
    assert sorted(ids(out)) == sorted(records) == [f"s{i}" for i in range(8)]
    assert records["s2"]["stdout"] == "two\n"


def test_a_line_cut_by_a_crash_is_dropped_and_that_item_runs_again(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    list(run_batch(snippets(3), out=out))
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:2]) + "\n" + lines[2][:40])  # killed mid-write
    lost = json.loads(lines[2])["id"]
    assert [r["id"] for r in run_batch(snippets(3), out=out)] == [lost]
    assert sorted(ids(out)) == ["s0", "s1", "s2"]


def test_per_item_policy_is_a_single_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_API_TOKEN", "very-secret")
    given = [
        {
            "id": "env",
            "language": "python",
            "code": "import os; print(os.environ.get('MY_API_TOKEN'))",
        },
        {"id": "slow", "language": "bash", "code": "echo started; sleep 30", "timeout_sec": 1},
        {"id": "loud", "language": "python", "code": "print('x' * 600_000)"},
        {"id": "stdin", "language": "python", "code": "print(input())", "stdin": "fed\n"},
        {"id": "no-stdin", "language": "python", "code": "input()"},
    ]
    started = time.monotonic()
    results = {r["id"]: r for r in run_batch(given, out=tmp_path / "r.jsonl")}
    assert time.monotonic() - started < 20
    assert results["env"]["stdout"] == "None\n"
    assert results["slow"]["status"] == "timed_out" and results["slow"]["exit_code"] == -1
    assert results["slow"]["stdout"] == "started\n"
    assert results["loud"]["truncated"] and len(results["loud"]["stdout"]) <= 512_000
    assert results["stdin"]["stdout"] == "fed\n"
    assert results["no-stdin"]["status"] == "failed" and "EOFError" in results["no-stdin"]["stderr"]
    assert all("tempdir" in r["isolation"] for r in results.values())


def test_the_deadline_stops_the_rest_and_keeps_what_finished(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    batches = BatchService(SandboxService(require_approval=False))
    given = [{"id": "quick", "language": "bash", "code": "echo quick"}] + [
        {"id": f"slow{i}", "language": "bash", "code": "sleep 20"} for i in range(3)
    ]
    batch = batches.plan(items_from_list(given), deadline_sec=2)

    async def go() -> dict[str, Any]:
        run = batches.start(batches.claim(batch.batch_id, None), out=out, workers=2)
        async for _ in run.results():
            pass
        return run.report()

    started = time.monotonic()
    report = asyncio.run(go())
    assert time.monotonic() - started < 10
    assert report["stopped"] == "deadline"
    assert sorted(report["not_run"]) == ["slow0", "slow1", "slow2"]
    assert ids(out) == ["quick"]


def test_leaving_the_loop_cancels_the_rest_and_keeps_what_finished(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    given = [{"id": "first", "language": "bash", "code": "echo first"}] + [
        {"id": f"slow{i}", "language": "bash", "code": "sleep 30"} for i in range(4)
    ]
    started = time.monotonic()
    for record in run_batch(given, out=out, workers=2):
        assert record["id"] == "first"
        break
    assert time.monotonic() - started < 10
    assert ids(out) == ["first"]
    rerun = [
        r["id"]
        for r in run_batch(given[:1] + [{**g, "code": "echo ok"} for g in given[1:]], out=out)
    ]
    assert sorted(rerun) == ["slow0", "slow1", "slow2", "slow3"]


def test_env_names_pass_variables_to_every_item_and_are_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COURSE_NAME", "Programming 101")
    monkeypatch.setenv(ENV_ALLOWLIST_ENV, "COURSE_NAME")  # the administrator's list
    code = "import os; print(os.environ.get('COURSE_NAME'))"
    given = [{"id": i, "language": "python", "code": code} for i in range(2)]
    passed = list(run_batch(given, env=["COURSE_NAME"]))
    assert [r["stdout"] for r in passed] == ["Programming 101\n"] * 2
    assert [r["stdout"] for r in run_batch(given)] == ["None\n"] * 2
    batches = BatchService(SandboxService())
    with_env = batches.plan(items_from_list(given), env=["COURSE_NAME"])
    assert with_env.digest != batches.plan(items_from_list(given)).digest


def test_a_rerun_counted_over_its_results_file_tells_the_whole_batch(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    batches = BatchService(SandboxService(require_approval=False))
    given = [
        *snippets(3),
        {"id": "bad", "language": "python", "code": "raise SystemExit(3)"},
        {"id": "wipe", "language": "bash", "code": "rm -rf /"},
    ]

    async def go(items: list[dict[str, Any]]) -> dict[str, Any]:
        batch = batches.plan(items_from_list(items))
        run = batches.start(batches.claim(batch.batch_id, None), out=out, workers=2)
        async for _ in run.results():
            pass
        return counted_over_file(run.report(), held_records(batch, out))

    first = asyncio.run(go(given))
    assert (first["ok"], first["failed"], first["blocked"], first["skipped"]) == (3, 1, 1, 0)
    again = asyncio.run(go(given))  # nothing runs: the counts are the file's
    assert (again["ok"], again["failed"], again["blocked"], again["skipped"]) == (3, 1, 1, 5)
    assert again["finished"] == 0 and set(again["this_run"].values()) == {0}
    # A stale line (the item changed since) is not counted: the new result is.
    given[3]["code"] = "print('fixed')"
    third = asyncio.run(go(given))
    assert (third["ok"], third["failed"], third["skipped"]) == (4, 0, 4)
    assert third["this_run"]["ok"] == 1 and len(read_results(out)) == 5
