"""REST ``inputs``: files and folders under the server's root handed to a run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.inputs import CSV, READ_BOTH, READ_BOTH_OUT, make_project, untouched

from .helpers import Api

READ = READ_BOTH


@pytest.fixture
def data(jp_root_dir: Path) -> Path:
    return make_project(jp_root_dir)


async def plan(api: Api, **body: object) -> dict[str, object]:
    answer = await api("POST", "api/sandbox/plan", {"language": "python", "code": READ, **body})
    assert answer.code == 200, answer.text
    plan: dict[str, object] = answer.body["plan"]
    return plan


@pytest.mark.usefixtures("data")
async def test_the_plan_lists_the_inputs_and_the_run_reads_them(api: Api) -> None:
    planned = await plan(api, inputs=["sales.csv", "data"])
    assert [(i["name"], i["kind"], i["size"]) for i in planned["inputs"]] == [  # type: ignore[attr-defined]
        ("sales.csv", "file", 31),
        ("data", "dir", 27),
    ]
    labels = [c["label"] for c in planned["checks"]]  # type: ignore[attr-defined]
    assert any(label.startswith("input sales.csv · 31 B · sha256:") for label in labels)
    approval = await api("POST", "api/sandbox/approve", {"plan_id": planned["plan_id"]})
    token = approval.body["approval_token"]
    result = await api("POST", "api/sandbox/run", {"approval_token": token})
    assert result.code == 200, result.text
    assert result.body["stdout"] == READ_BOTH_OUT


async def test_a_file_changed_after_approval_is_refused(api: Api, data: Path) -> None:
    planned = await plan(api, inputs=["sales.csv"])
    approval = await api("POST", "api/sandbox/approve", {"plan_id": planned["plan_id"]})
    (data / "sales.csv").write_text(CSV + "east,1\n")
    refused = await api(
        "POST", "api/sandbox/run", {"approval_token": approval.body["approval_token"]}
    )
    assert (refused.code, refused.body["code"]) == (403, "approval_mismatch")
    assert "sales.csv" in refused.body["message"]


async def test_plan_and_run_takes_inputs(api: Api, data: Path) -> None:
    body = {"language": "python", "code": READ, "inputs": ["sales.csv", "data"]}
    answer = await api("POST", "api/sandbox/plan-and-run", body)
    assert answer.code == 200, answer.text
    assert answer.body["result"]["stdout"] == READ_BOTH_OUT
    assert untouched(data)


@pytest.mark.parametrize(
    ("inputs", "code"),
    [
        (["../outside.csv"], "invalid_input"),
        (["link.csv"], "input_symlink"),
        (["data"], "input_symlink"),
        ([".env"], "invalid_input"),
        (["out"], "input_name_clash"),
    ],
)
@pytest.mark.parametrize("session", [None, "nb"])
async def test_refused_inputs_are_400_with_their_code(
    api: Api, data: Path, inputs: list[str], code: str, session: str | None
) -> None:
    """The same refusals for a single run and for a session's cell (``session``)."""
    outside = data.parent / "outside.csv"
    outside.write_text("secret\n")
    os.symlink(outside, data / "link.csv")
    os.symlink(outside, data / "data" / "leak.csv")
    (data / ".env").write_text("API_KEY=hunter2\n")
    (data / "out").mkdir()
    body = {"language": "python", "code": READ, "inputs": inputs, "session": session}
    answer = await api("POST", "api/sandbox/plan", body)
    assert (answer.code, answer.body["code"]) == (400, code)
    assert "secret" not in answer.text and "hunter2" not in answer.text


async def test_the_long_form_of_a_run_hashes_the_inputs_again(api: Api, data: Path) -> None:
    planned = await plan(api, inputs=["sales.csv"])
    approval = await api("POST", "api/sandbox/approve", {"plan_id": planned["plan_id"]})
    body = {
        "language": "python",
        "code": READ,
        "inputs": ["sales.csv"],
        "approval_token": approval.body["approval_token"],
    }
    (data / "sales.csv").write_text(CSV.replace("12", "13"))
    refused = await api("POST", "api/sandbox/run", body)
    assert (refused.code, refused.body["code"]) == (403, "approval_mismatch")
    (data / "sales.csv").write_text(CSV)  # as approved again: the unspent token runs it
    result = await api("POST", "api/sandbox/run", body)
    assert result.code == 200 and result.body["stdout"].startswith("42\n"), result.text
