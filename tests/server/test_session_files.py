"""A session's cells over REST take ``inputs`` and hand back ``out/`` files, as a run does:
the plan lists both, the result lists the files the cell wrote or changed, the owner
downloads them, and an out/ symlink hands back nothing. (The hostile inputs a run
refuses are refused for a cell too: tests/server/test_inputs.py.)"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.support.inputs import CSV, READ_BOTH, READ_BOTH_OUT, make_project

from .helpers import Api
from .test_run_files import ALICE, BOB, fetch_file
from .test_sessions import jp_server_config, start

__all__ = ["jp_server_config"]  # (the fixture: a server with named users)


@pytest.fixture
def data(jp_root_dir: Path) -> Path:
    return make_project(jp_root_dir)


async def plan_cell(api: Api, code: str, **body: object) -> dict[str, Any]:
    answer = await api(
        "POST",
        "api/sandbox/plan",
        {"language": "python", "code": code, "session": "nb", **body},
        headers=ALICE,
    )
    assert answer.code == 200, answer.text
    plan: dict[str, Any] = answer.body["plan"]
    return plan


async def run_plan(api: Api, plan: dict[str, Any]) -> Any:
    approval = await api("POST", "api/sandbox/approve", {"plan_id": plan["plan_id"]}, headers=ALICE)
    token = approval.body["approval_token"]
    return await api("POST", "api/sandbox/run", {"approval_token": token}, headers=ALICE)


@pytest.mark.usefixtures("data")
async def test_a_cell_reads_its_inputs_and_hands_back_its_out_files(
    api: Api, jp_fetch: Any
) -> None:
    await start(api, "nb", ALICE)
    code = (
        READ_BOTH
        + "import os\nos.makedirs('out', exist_ok=True)\nopen('out/sum.txt', 'w').write('42')"
    )
    planned = await plan_cell(api, code, inputs=["sales.csv", "data"])
    assert [(i["name"], i["kind"]) for i in planned["inputs"]] == [
        ("sales.csv", "file"),
        ("data", "dir"),
    ]
    labels = [c["label"] for c in planned["checks"]]
    assert any(label.startswith("input sales.csv · 31 B · sha256:") for label in labels)
    assert any("the session's folder" in label for label in labels), labels
    assert any("what this cell writes or changes under out/" in label for label in labels)
    ran = await run_plan(api, planned)
    assert ran.code == 200, ran.text
    result = ran.body
    assert result["stdout"] == READ_BOTH_OUT, result["stderr"]
    assert result["files"] == [
        {"name": "sum.txt", "size": 2, "sha256": "sha256:" + hashlib.sha256(b"42").hexdigest()}
    ]
    got = await fetch_file(jp_fetch, result["run_id"], "sum.txt", ALICE)
    assert got.code == 200 and got.body == b"42"
    other = await fetch_file(jp_fetch, result["run_id"], "sum.txt", BOB)
    assert other.code == 404
    # The next cell wrote nothing new: it lists nothing (the file is handed back once).
    quiet = await run_plan(api, await plan_cell(api, "print(open('sales.csv').read(), end='')"))
    assert quiet.body["stdout"] == CSV and quiet.body["files"] == []


async def test_an_input_changed_after_approval_is_refused_and_the_token_kept(
    api: Api, data: Path
) -> None:
    await start(api, "nb", ALICE)
    planned = await plan_cell(api, "print(open('sales.csv').read(), end='')", inputs=["sales.csv"])
    approval = await api(
        "POST", "api/sandbox/approve", {"plan_id": planned["plan_id"]}, headers=ALICE
    )
    token = approval.body["approval_token"]
    (data / "sales.csv").write_text(CSV + "east,1\n")
    refused = await api("POST", "api/sandbox/run", {"approval_token": token}, headers=ALICE)
    assert (refused.code, refused.body["code"]) == (403, "approval_mismatch"), refused.text
    (data / "sales.csv").write_text(CSV)  # as approved again: the unspent token runs it
    ran = await api("POST", "api/sandbox/run", {"approval_token": token}, headers=ALICE)
    assert ran.code == 200 and ran.body["stdout"] == CSV, ran.text


async def test_an_out_symlink_to_a_secret_hands_back_no_byte_of_it(api: Api) -> None:
    await start(api, "nb", ALICE)
    code = (
        "import os\nos.makedirs('out', exist_ok=True)\n"
        "os.symlink('/etc/shadow', 'out/shadow')\nos.symlink('/etc/passwd', 'out/passwd')"
    )
    ran = await run_plan(api, await plan_cell(api, code))
    assert ran.code == 200, ran.text
    assert ran.body["files"] == []
    assert any("out/shadow" in note and "symlink" in note for note in ran.body["notes"])
    assert "root:" not in ran.text
