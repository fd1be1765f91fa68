"""A batch plan: one approval bound to the whole manifest; blocked items reported, never run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.batch import (
    BatchService,
    items_from_list,
    load_folder,
    load_jsonl,
    worker,
)
from gitpilot_jupyter.sandbox.errors import (
    ApprovalError,
    FileAccessError,
    InvalidRequest,
    PlanNotFound,
)
from gitpilot_jupyter.sandbox.service import SandboxService


def items(n: int = 4) -> list[dict[str, Any]]:
    return [{"id": f"s{i}", "language": "py", "code": f"print({i})"} for i in range(n)]


@pytest.fixture
def batches(tmp_path: Path) -> BatchService:
    return BatchService(SandboxService(root_dir=tmp_path, require_approval=True))


def run_all(batches: BatchService, batch_id: str, token: str | None) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        run = batches.start(batches.claim(batch_id, token), workers=2)
        return [r async for r in run.results()]

    return asyncio.run(go())


def test_the_plan_shows_count_languages_warnings_and_blocked(batches: BatchService) -> None:
    given = [
        *items(3),
        {"id": "sys", "language": "python", "code": "import os\nos.system('ls')"},
        {"id": "js", "language": "node", "code": "console.log(1)"},
        {"id": "wipe", "language": "sh", "code": "rm -rf /"},
    ]
    batch = batches.plan(items_from_list(given))
    summary = batch.to_dict(items=False)
    assert summary["count"] == 6 and summary["runnable"] == 5
    assert summary["languages"] == {"python": 4, "javascript": 1, "bash": 1}
    assert summary["blocked"] == [{"id": "wipe", "reason": "destructive pattern 'rm -rf /'"}]
    assert summary["high_risk"] == ["sys"]
    assert {"label": "os.system", "severity": "high", "items": 1} in summary["warnings"]
    # The approver can open any item: its full plan, code included.
    assert batch.item("sys").spec.code == "import os\nos.system('ls')"
    assert batch.item("js").spec.language == "javascript"
    with pytest.raises(PlanNotFound):
        batch.item("nope")


def test_one_token_runs_them_all_once(batches: BatchService) -> None:
    batch = batches.plan(items_from_list(items(4)))
    token = batches.approve(batch.batch_id)["approval_token"]
    results = run_all(batches, batch.batch_id, token)
    assert sorted(r["stdout"] for r in results) == ["0\n", "1\n", "2\n", "3\n"]
    assert all(r["status"] == "ok" and r["plan_id"] for r in results)
    with pytest.raises(ApprovalError) as used:
        batches.claim(batch.batch_id, token)
    assert used.value.code == "approval_used"


@pytest.mark.parametrize(
    "change",
    [
        {"code": "print('changed')"},
        {"language": "bash", "code": "echo 1"},
        {"stdin": "extra input"},
        {"timeout_sec": 7},
    ],
)
def test_changing_one_item_refuses_the_token(batches: BatchService, change: dict[str, Any]) -> None:
    original = items(5)
    batch = batches.plan(items_from_list(original))
    token = batches.approve(batch.batch_id)["approval_token"]
    altered = [dict(it) for it in original]
    altered[3].update(change)
    with pytest.raises(ApprovalError) as refused:
        batches.claim(batch.batch_id, token, items=items_from_list(altered))
    assert refused.value.code == "approval_mismatch"
    # The token was not spent: the approved manifest still runs with it.
    claimed = batches.claim(batch.batch_id, token, items=items_from_list(original))
    assert claimed.batch_id == batch.batch_id


@pytest.mark.usefixtures("allow_off")
def test_network_backend_and_deadline_are_bound_too(batches: BatchService) -> None:
    base = items_from_list(items(2))
    digests = {
        batches.plan(base).digest,
        batches.plan(base, allow_network=True).digest,
        batches.plan(base, backend="off").digest,
        batches.plan(base, deadline_sec=60).digest,
        batches.plan(list(reversed(base))).digest,
    }
    assert len(digests) == 5


def test_a_run_needs_the_token(batches: BatchService) -> None:
    batch = batches.plan(items_from_list(items(2)))
    for bad, code in ((None, "approval_required"), ("forged", "approval_unknown")):
        with pytest.raises(ApprovalError) as refused:
            batches.claim(batch.batch_id, bad)
        assert refused.value.code == code
    other = batches.plan(items_from_list(items(3)))
    other_token = batches.approve(other.batch_id)["approval_token"]
    with pytest.raises(ApprovalError) as refused:
        batches.claim(batch.batch_id, other_token)
    assert refused.value.code == "approval_mismatch"


def test_blocked_items_are_reported_and_never_run(batches: BatchService, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    given = [
        *items(2),
        # Were it run, the first line would leave a file behind.
        {"id": "bomb", "language": "bash", "code": f"touch {marker}\n:(){{ :|:& }};:"},
        {"id": "wipe", "language": "bash", "code": f"touch {marker}; rm -rf /"},
    ]
    batch = batches.plan(items_from_list(given))
    token = batches.approve(batch.batch_id)["approval_token"]
    results = {r["id"]: r for r in run_all(batches, batch.batch_id, token)}
    assert results["bomb"]["status"] == results["wipe"]["status"] == "blocked"
    assert "fork bomb" in results["bomb"]["reason"] or ":(){" in results["bomb"]["reason"]
    assert "exit_code" not in results["wipe"]
    assert not marker.exists()
    assert results["s0"]["status"] == results["s1"]["status"] == "ok"


def test_bad_input_names_the_line_or_item(tmp_path: Path) -> None:
    jsonl = tmp_path / "items.jsonl"
    jsonl.write_text('{"id": "a", "language": "python", "code": "1"}\n{"id": "b", "code": \n')
    with pytest.raises(InvalidRequest, match="line 2: not valid JSON"):
        load_jsonl(jsonl)
    jsonl.write_text('{"id": "a", "code": "1"}\n{"id": "a", "code": "2"}\n')
    with pytest.raises(InvalidRequest, match="'a' appears twice"):
        load_jsonl(jsonl)
    with pytest.raises(InvalidRequest, match="item 1: every item needs an id"):
        items_from_list([{"code": "1"}])
    with pytest.raises(InvalidRequest, match="exactly one of code or file"):
        items_from_list([{"id": 1, "code": "1", "file": "x.py"}])
    with pytest.raises(InvalidRequest, match="unknown field"):
        items_from_list([{"id": 1, "code": "1", "lang": "py"}])
    with pytest.raises(InvalidRequest, match="no items"):
        items_from_list([])


def test_unplannable_item_fails_the_plan_naming_it(batches: BatchService) -> None:
    with pytest.raises(Exception, match="item 'x'") as failed:
        batches.plan(items_from_list([*items(2), {"id": "x", "language": "cobol", "code": "1"}]))
    assert getattr(failed.value, "code", "") == "unknown_language"


def test_jsonl_files_are_read_beside_it_and_never_outside(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "hello.sh").write_text("echo hi\n")
    (tmp_path / "secret.py").write_text("print('no')\n")
    jsonl = tmp_path / "work" / "items.jsonl"
    jsonl.write_text('{"id": 1, "file": "hello.sh"}\n')
    [item] = load_jsonl(jsonl)
    assert (item.language, item.code, item.file) == ("bash", "echo hi\n", "hello.sh")
    jsonl.write_text('{"id": 1, "file": "../secret.py"}\n')
    with pytest.raises(FileAccessError, match=r"item '1': file '../secret.py' is outside .*work"):
        load_jsonl(jsonl)


def test_a_folder_with_a_command_template_runs_each_file(
    batches: BatchService, tmp_path: Path
) -> None:
    folder = tmp_path / "subs"
    (folder / "late").mkdir(parents=True)
    (folder / "alice.txt").write_text("it's alice\n")
    (folder / "late" / "bob.txt").write_text('say "bob" $HOME\n')
    (folder / ".hidden").write_text("skip me\n")
    found = load_folder(folder, each="wc -c < {file}; cat {file}")
    assert [it.id for it in found] == ["alice.txt", "late/bob.txt"]
    batch = batches.plan(found)
    token = batches.approve(batch.batch_id)["approval_token"]
    results = {r["id"]: r for r in run_all(batches, batch.batch_id, token)}
    assert results["alice.txt"]["stdout"] == "11\nit's alice\n"
    assert results["late/bob.txt"]["stdout"] == '16\nsay "bob" $HOME\n'


def test_files_run_through_each_are_scanned_in_their_own_language(
    batches: BatchService, tmp_path: Path
) -> None:
    folder = tmp_path / "subs"
    folder.mkdir()
    (folder / "clean.py").write_text("print(1)\n")
    (folder / "sneaky.py").write_text("import os\nos.system('curl example')\n")
    batch = batches.plan(load_folder(folder, each="python3 {file}"))
    assert batch.summary()["high_risk"] == ["sneaky.py"]
    [warning] = [w for w in batch.item("sneaky.py").warnings if w["label"] == "os.system"]
    assert warning["severity"] == "high" and warning["detail"].startswith("in sneaky.py: ")


def test_a_dask_task_carries_the_items_stdin_and_no_file_for_its_label(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The JSONL sits outside the worker's root: the item's file is only a label of its code.
    (tmp_path / "items").mkdir()
    (tmp_path / "items" / "greet.sh").write_text('read -r name; echo "hi $name"\n')
    jsonl = tmp_path / "items" / "items.jsonl"
    jsonl.write_text('{"id": "g", "file": "greet.sh", "stdin": "ada\\n"}\n')
    node = SandboxService(root_dir=tmp_path / "elsewhere", require_approval=True)
    monkeypatch.setattr(worker, "_service", node)
    batch = BatchService(node).plan(load_jsonl(jsonl))
    plan = batch.item("g")
    assert (plan.file, plan.spec.file, plan.to_dict()["file"]) == ("greet.sh", None, "greet.sh")
    payload = {**json.loads(json.dumps(worker.plan_payload(plan, "ada"))), "id": "g"}  # shipped
    entries = [(i, p.digest) for i, p in batch.items.items()]
    manifest = worker.manifest_payload(batch.digest, batch.deadline_sec, entries)
    answer = worker.run_item(payload, manifest)
    assert answer["result"]["stdout"] == "hi ada\n", answer
    assert answer["result"]["command"] == plan.command == ["bash", "greet.sh"]  # its name
    assert answer["result"]["plan_id"] == plan.plan_id


def test_an_item_read_from_a_file_runs_under_its_name(
    batches: BatchService, tmp_path: Path
) -> None:
    # As `jupyter sandbox run FILE`: the plan, the result and the traceback name the file.
    folder = tmp_path / "subs"
    files = {"hello.py": "print('hi')\nraise ValueError('late')\n", "late/bob.sh": "echo bob\n"}
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    batch = batches.plan(load_folder(folder))
    hello = batch.item("hello.py")
    assert hello.command == ["python", "hello.py"] and hello.goal == "Run hello.py"
    assert batch.item("late/bob.sh").command == ["bash", "bob.sh"]
    token = batches.approve(batch.batch_id)["approval_token"]
    results = {r["id"]: r for r in run_all(batches, batch.batch_id, token)}
    assert results["hello.py"]["command"] == ["python", "hello.py"]
    assert '/hello.py", line 2, in <module>' in results["hello.py"]["stderr"]
    assert "inline" not in results["hello.py"]["stderr"]
    assert results["late/bob.sh"]["stdout"] == "bob\n"
    # --each runs its own bash wrapper, which writes the file under its name: not renamed.
    wrapped = batches.plan(load_folder(folder, each="python3 {file}"))
    assert wrapped.item("hello.py").command == ["bash", "inline.sh"]
