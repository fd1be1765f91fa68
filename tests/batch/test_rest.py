"""``POST /api/sandbox/batch/plan``, ``/batch/approve``, ``/batch`` on a real Jupyter server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from traitlets.config import Config

from tests.server.helpers import NDJSON, Api, check_stream_line
from tests.support.audit import listen_to_audit
from tests.support.inputs import READ_BOTH, make_project

ITEMS = [
    {"id": "a", "language": "python", "code": "print('a')"},
    {"id": "b", "language": "bash", "code": "echo b; exit 4"},
    {"id": "c", "language": "py", "code": "import os\nos.system('true')\nprint('c')"},
    {"id": "wipe", "language": "bash", "code": "rm -rf /"},
]


async def plan_batch(api: Api, items: list[dict[str, Any]] = ITEMS, **extra: Any) -> dict[str, Any]:
    answer = await api("POST", "api/sandbox/batch/plan", {"items": items, **extra})
    assert answer.code == 200, answer.text
    batch: dict[str, Any] = answer.body["batch"]
    return batch


async def approve(api: Api, batch_id: str) -> str:
    answer = await api("POST", "api/sandbox/batch/approve", {"batch_id": batch_id})
    assert answer.code == 200, answer.text
    assert answer.body["batch_id"] == batch_id
    token: str = answer.body["approval_token"]
    return token


async def test_plan_approve_run_with_one_token(api: Api) -> None:
    batch = await plan_batch(api)
    assert (batch["count"], batch["runnable"]) == (4, 3)
    assert batch["languages"] == {"python": 2, "bash": 2}
    assert batch["blocked"] == [{"id": "wipe", "reason": "destructive pattern 'rm -rf /'"}]
    assert batch["high_risk"] == ["c"]
    assert [item["id"] for item in batch["items"]] == ["a", "b", "c", "wipe"]
    assert batch["items"][2]["code"].startswith("import os")  # the approver can open any item
    token = await approve(api, batch["batch_id"])
    answer = await api(
        "POST", "api/sandbox/batch", {"batch_id": batch["batch_id"], "approval_token": token}
    )
    assert answer.code == 200, answer.text
    records = {r["id"]: r for r in answer.body["results"]}
    assert records["a"]["stdout"] == "a\n" and records["a"]["status"] == "ok"
    assert records["b"]["status"] == "failed" and records["b"]["exit_code"] == 4
    assert records["wipe"]["status"] == "blocked" and "exit_code" not in records["wipe"]
    report = answer.body["report"]
    assert (report["ok"], report["failed"], report["blocked"], report["total"]) == (2, 1, 1, 4)
    again = await api(
        "POST", "api/sandbox/batch", {"batch_id": batch["batch_id"], "approval_token": token}
    )
    assert (again.code, again.body["code"]) == (403, "approval_used")


async def test_changing_one_item_refuses_the_token(api: Api) -> None:
    batch = await plan_batch(api)
    token = await approve(api, batch["batch_id"])
    changed = [dict(item) for item in ITEMS]
    changed[0]["code"] = "print('A')"
    body = {"batch_id": batch["batch_id"], "approval_token": token, "items": changed}
    refused = await api("POST", "api/sandbox/batch", body)
    assert (refused.code, refused.body["code"]) == (403, "approval_mismatch")
    body["items"] = ITEMS  # the token was not spent
    ran = await api("POST", "api/sandbox/batch", body)
    assert ran.code == 200 and ran.body["report"]["ok"] == 2


async def test_a_resumed_run_skips_the_items_the_caller_holds(api: Api) -> None:
    batch = await plan_batch(api)
    token = await approve(api, batch["batch_id"])
    body = {"batch_id": batch["batch_id"], "approval_token": token, "skip": ["a", "nope"]}
    refused = await api("POST", "api/sandbox/batch", body)
    assert (refused.code, refused.body["code"]) == (400, "invalid_request"), refused.text
    body["skip"] = ["a", "c"]  # the token was not spent; the approved manifest runs, less a, c
    ran = await api("POST", "api/sandbox/batch", body)
    assert ran.code == 200, ran.text
    assert sorted(r["id"] for r in ran.body["results"]) == ["b", "wipe"]
    report = ran.body["report"]
    assert (report["digest"], report["total"], report["failed"]) == (batch["digest"], 2, 1)


async def test_the_run_streams_items_and_progress_as_ndjson(api: Api) -> None:
    items = [{"id": str(i), "language": "bash", "code": f"echo {i}"} for i in range(5)]
    batch = await plan_batch(api, items)
    token = await approve(api, batch["batch_id"])
    answer = await api(
        "POST",
        "api/sandbox/batch",
        {"batch_id": batch["batch_id"], "approval_token": token, "workers": 2},
        headers={"Accept": NDJSON},
    )
    assert answer.code == 200 and answer.headers["Content-Type"].startswith(NDJSON)
    lines = [json.loads(text) for text in answer.text.splitlines()]
    for line in lines:
        check_stream_line(line, "BatchReport")
    kinds = [line["type"] for line in lines]
    assert kinds.count("item") == 5 and kinds[-1] == "result"
    assert all(kinds[i + 1] == "progress" for i, kind in enumerate(kinds) if kind == "item")
    assert sorted(line["stdout"] for line in lines if line["type"] == "item") == [
        f"{i}\n" for i in range(5)
    ]
    after_items = [lines[i + 1]["finished"] for i, kind in enumerate(kinds) if kind == "item"]
    assert after_items == [1, 2, 3, 4, 5]
    assert lines[-1]["ok"] == 5 and lines[-1]["stopped"] is None


async def test_refusals_are_plain_json_errors(api: Api) -> None:
    bad_item = await api(
        "POST", "api/sandbox/batch/plan", {"items": [{"id": 1, "language": "cobol", "code": "x"}]}
    )
    assert (bad_item.code, bad_item.body["code"]) == (400, "unknown_language")
    assert "item '1'" in bad_item.body["message"]
    twice = await api(
        "POST",
        "api/sandbox/batch/plan",
        {"items": [{"id": 1, "code": "1"}, {"id": 1, "code": "2"}]},
    )
    assert (twice.code, twice.body["code"]) == (400, "invalid_request")
    hidden = await api("POST", "api/sandbox/batch/plan", {"items": [{"id": 1, "file": ".env"}]})
    assert hidden.code == 400
    unknown = await api("POST", "api/sandbox/batch/approve", {"batch_id": "batch_0000000000000000"})
    assert (unknown.code, unknown.body["code"]) == (404, "plan_not_found")
    batch = await plan_batch(api)
    unapproved = await api("POST", "api/sandbox/batch", {"batch_id": batch["batch_id"]})
    assert (unapproved.code, unapproved.body["code"]) == (403, "approval_required")
    odd = await api("POST", "api/sandbox/batch/plan", {"items": ITEMS, "deadline_sec": 0})
    assert odd.code == 400 and "deadline_sec" in odd.body["message"]


@pytest.mark.parametrize(
    "jp_server_config",
    [Config({"ServerApp": {"jpserver_extensions": {"gitpilot_jupyter": True}}})],
    indirect=True,
)
async def test_every_batch_route_needs_authentication(jp_fetch: Any) -> None:
    for path in ("batch/plan", "batch/approve", "batch"):
        answer = await jp_fetch(
            "api", "sandbox", *path.split("/"), method="POST", body=json.dumps({"items": ITEMS}),
            headers={"Authorization": ""}, raise_error=False,
        )  # fmt: skip
        assert answer.code == 403


@pytest.fixture
def client(
    http_server_client: Any, jp_http_port: int, jp_base_url: str, jp_auth_header: dict[str, str]
) -> httpx.AsyncClient:
    """A real HTTP client on the test server (``http_server_client`` makes it listen)."""
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{jp_http_port}{jp_base_url}", headers=jp_auth_header, timeout=60
    )


def sleepers() -> list[int]:
    """Pids of this test's long snippets (a number no other process sleeps for)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", str(SLEEP).encode()]:
                pids.append(int(cmdline.parent.name))
    return pids


SLEEP = 31337


async def test_closing_the_stream_stops_the_batch(api: Api, client: httpx.AsyncClient) -> None:
    items = [{"id": "quick", "language": "bash", "code": "echo quick"}] + [
        {"id": f"slow{i}", "language": "bash", "code": f"sleep {SLEEP}"} for i in range(3)
    ]
    batch = await plan_batch(api, items)
    token = await approve(api, batch["batch_id"])
    body = {"batch_id": batch["batch_id"], "approval_token": token, "workers": 4}
    async with (
        client,
        client.stream("POST", "api/sandbox/batch", json=body, headers={"Accept": NDJSON}) as answer,
    ):
        assert answer.status_code == 200
        async for text in answer.aiter_lines():
            if text.strip() and json.loads(text)["type"] == "item":
                assert json.loads(text)["id"] == "quick"
                break
        deadline = time.monotonic() + 20
        while not sleepers() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert sleepers(), "the slow items should be running now"
    # The client went away: the server cancels the rest (their process trees die).
    deadline = time.monotonic() + 20
    while sleepers() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert sleepers() == []


async def test_each_item_is_audited_as_a_single_run_is(api: Api, jp_serverapp: Any) -> None:
    seen = listen_to_audit(jp_serverapp)
    secret = "print('batch-code-never-logged')"
    items = [{"id": "x", "language": "python", "code": secret}, ITEMS[3]]
    batch = await plan_batch(api, items)
    token = await approve(api, batch["batch_id"])
    ran = await api(
        "POST", "api/sandbox/batch", {"batch_id": batch["batch_id"], "approval_token": token}
    )
    assert ran.code == 200
    await jp_serverapp.event_logger.gather_listeners()
    kinds = [kind for kind, _ in seen]
    # Both items planned; only the runnable one approved and run; the blocked one never runs.
    assert sorted(kinds) == ["approve", "plan", "plan", "run"]
    by_kind = dict(seen)
    x = batch["items"][0]
    assert by_kind["approve"]["plan_id"] == by_kind["run"]["plan_id"] == x["plan_id"]
    assert by_kind["run"]["digest"] == x["digest"]
    assert by_kind["approve"]["approved_by"] == f"batch {batch['batch_id']}"
    assert "batch-code-never-logged" not in json.dumps(seen)


async def test_the_items_inputs_are_hashed_off_the_event_loop(
    api: Api, jp_root_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's inputs may be large files: the server reads and hashes them in a worker
    thread, at the plan and again when the items are sent with the run, never on the
    loop that serves every other request."""
    make_project(jp_root_dir)
    from gitpilot_jupyter.sandbox import inputs

    loop_thread = threading.get_ident()
    hashed_on: list[int] = []
    real = inputs._hash_file

    def recording(*args: Any, **kwargs: Any) -> tuple[int, str]:
        hashed_on.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(inputs, "_hash_file", recording)
    items = [
        {"id": "read", "language": "python", "code": READ_BOTH, "inputs": ["sales.csv", "data"]}
    ]
    batch = await plan_batch(api, items)
    assert hashed_on and loop_thread not in hashed_on
    token = await approve(api, batch["batch_id"])
    hashed_on.clear()
    body = {"batch_id": batch["batch_id"], "approval_token": token, "items": items}
    answer = await api("POST", "api/sandbox/batch", body)
    assert answer.code == 200, answer.text
    assert answer.body["results"][0]["status"] == "ok", answer.body
    assert hashed_on and loop_thread not in hashed_on
