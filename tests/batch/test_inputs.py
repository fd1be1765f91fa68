"""Batch items with ``inputs``: each item's run reads its own files; a change after the
batch's approval refuses the item."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.batch import read_results
from gitpilot_jupyter.sandbox.batch.items import BatchItem, load_jsonl
from gitpilot_jupyter.sandbox.batch.plan import plan_batch
from gitpilot_jupyter.sandbox.inputs import RunInput
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.support.inputs import READ_BOTH, READ_BOTH_OUT, make_project, untouched

from .test_cli import cli


def items_file(folder: Path) -> Path:
    items = [
        {"id": "both", "language": "python", "code": READ_BOTH, "inputs": ["sales.csv", "data"]},
        {"id": "count", "language": "bash", "code": "wc -l < sales.csv", "inputs": ["sales.csv"]},
        {"id": "none", "language": "bash", "code": "ls"},
    ]
    path = folder / "items.jsonl"
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path


def test_each_item_reads_its_own_inputs(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    ran = cli(str(items_file(project)), "--out", "results.jsonl", "--yes", cwd=project)
    assert ran.returncode == 0, ran.stderr
    results = {r["id"]: r for r in read_results(project / "results.jsonl")}
    assert results["both"]["stdout"] == READ_BOTH_OUT
    assert results["count"]["stdout"].strip() == "3"
    assert results["none"]["stdout"].split() == ["inline.sh", "out"]  # no input, only out/
    assert untouched(project)


def test_an_items_inputs_are_found_beside_its_jsonl_file(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    (item,) = load_jsonl(items_file(project))[:1]
    assert item.inputs == (str(project / "sales.csv"), str(project / "data"))
    assert item.to_dict()["inputs"] == list(item.inputs)


def test_the_batch_plan_names_the_inputs(tmp_path: Path) -> None:
    project = make_project(tmp_path)
    items = str(items_file(project))
    shown = cli(items, "--plan", cwd=project)
    assert "inputs: 2 item(s) get files: data, sales.csv" in shown.stdout, shown.stdout
    opened = cli(items, "--plan", "--show", "both", cwd=project)
    assert "input sales.csv · 31 B · sha256:" in opened.stdout
    assert "input data/ (1 file) · 27 B · sha256:" in opened.stdout


def test_items_sharing_an_input_have_it_hashed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path)
    service = SandboxService(root_dir=project)
    looks: list[tuple[str, ...]] = []
    inputs_of = service.planner.inputs_of

    def counted(options: RunOptions) -> tuple[RunInput, ...]:
        looks.append(tuple(options.inputs))
        return inputs_of(options)

    monkeypatch.setattr(service.planner, "inputs_of", counted)
    items = [BatchItem(str(n), "python", READ_BOTH, inputs=("sales.csv",)) for n in range(20)]
    batch = plan_batch(service, items)
    assert looks == [("sales.csv",)]
    assert len({p.digest for p in batch.items.values()}) == 1
    assert all(p.spec.inputs[0].name == "sales.csv" for p in batch.items.values())
