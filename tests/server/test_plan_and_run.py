"""``POST /api/sandbox/plan-and-run``: a cell's plan, approval and run in one request.

On a real server: the snippet really runs (or, for a plan that needs a person's
look, really does not), the audit has the same three events as the three-call flow,
and stopping works as for ``POST /run``.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from gitpilot_jupyter.sandbox.results import new_run_id

from .helpers import NDJSON, Api, check_stream_line
from .test_cancel import appears, gone, new_marker, sleeper

ROUTE = "api/sandbox/plan-and-run"
#: A plan with a high-severity warning (a process is started): it needs a person's look.
HIGH = "import subprocess\nprint('looked at')"


async def settled(jp_serverapp: Any, events: list[tuple[str, dict[str, Any]]]) -> list[str]:
    await jp_serverapp.event_logger.gather_listeners()
    return [kind for kind, _ in events]


async def test_one_request_streams_the_output_then_the_plan_and_its_result(
    client: httpx.AsyncClient, jp_serverapp: Any, events: list[tuple[str, dict[str, Any]]]
) -> None:
    body = {"language": "py", "code": "print('one')\nprint('trip')", "session_id": "k-1"}
    lines: list[dict[str, Any]] = []
    async with (
        client,
        client.stream("POST", ROUTE, json=body, headers={"Accept": NDJSON}) as answer,
    ):
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith(NDJSON)
        async for text in answer.aiter_lines():
            if text.strip():
                line = json.loads(text)
                check_stream_line(line, "PlannedRun")
                lines.append(line)
    *output, last = lines
    assert "".join(line["data"] for line in output if line["type"] == "stdout") == "one\ntrip\n"
    assert last["type"] == "result"
    plan, result = last["plan"], last["result"]
    assert plan["language"] == "python" and plan["source"] == "cell"
    assert result["exit_code"] == 0 and result["stdout"] == "one\ntrip\n"
    assert result["plan_id"] == plan["plan_id"]
    # Audited as the three calls are: the plan, its approval by the cell, the run.
    assert await settled(jp_serverapp, events) == ["plan", "approve", "run"]
    (_, planned), (_, approved), (_, ran) = events
    assert planned["plan_id"] == approved["plan_id"] == ran["plan_id"] == plan["plan_id"]
    assert approved["approved_by"] == "cell"
    assert ran["run_id"] == result["run_id"] and ran["exit_code"] == 0


async def test_plain_json_without_the_stream_header(api: Api) -> None:
    answer = await api("POST", ROUTE, {"language": "bash", "code": "echo plain; exit 3"})
    assert answer.code == 200 and answer.headers["Content-Type"].startswith("application/json")
    assert answer.body["plan"]["language"] == "bash"
    assert answer.body["result"]["stdout"] == "plain\n" and answer.body["result"]["exit_code"] == 3


async def test_a_plan_that_needs_a_look_waits_unrun_until_approved(
    api: Api, jp_serverapp: Any, events: list[tuple[str, dict[str, Any]]]
) -> None:
    answer = await api("POST", ROUTE, {"language": "python", "code": HIGH, "session_id": "k-2"})
    assert answer.code == 200 and answer.body["result"] is None
    plan = answer.body["plan"]
    assert any(w["severity"] == "high" for w in plan["warnings"]) and not plan["blocked"]
    assert await settled(jp_serverapp, events) == ["plan"]  # nothing approved, nothing ran
    # The card's way: approve, then run by token (the plan was kept pending).
    approval = await api(
        "POST", "api/sandbox/approve", {"plan_id": plan["plan_id"], "session_id": "k-2"}
    )
    assert approval.code == 200
    token = approval.body["approval_token"]
    run = await api("POST", "api/sandbox/run", {"approval_token": token, "session_id": "k-2"})
    assert run.code == 200 and run.body["stdout"] == "looked at\n"
    assert await settled(jp_serverapp, events) == ["plan", "approve", "run"]
    assert events[1][1]["approved_by"] == "user"  # a person, on the card


async def test_confirm_runs_a_high_warning_plan_at_once(api: Api) -> None:
    body = {"language": "python", "code": HIGH, "confirm": True}
    answer = await api("POST", ROUTE, body)
    assert answer.code == 200 and answer.body["result"]["stdout"] == "looked at\n"


async def test_a_blocked_plan_is_refused_and_never_runs(
    api: Api, jp_serverapp: Any, events: list[tuple[str, dict[str, Any]]]
) -> None:
    body = {"language": "bash", "code": "rm -rf /", "confirm": True}
    answer = await api("POST", ROUTE, body, headers={"Accept": NDJSON})
    assert answer.code == 409 and answer.body["code"] == "plan_blocked"
    assert "nothing ran" in answer.body["message"] and "rm -rf /" in answer.body["message"]
    assert await settled(jp_serverapp, events) == ["plan"]


async def test_bad_bodies_are_400s_before_anything_is_planned(
    api: Api, jp_serverapp: Any, events: list[tuple[str, dict[str, Any]]]
) -> None:
    missing = await api("POST", ROUTE, {"language": "python"})
    assert missing.code == 400 and missing.body["code"] == "missing_field"
    unknown = await api("POST", ROUTE, {"language": "python", "code": "1", "approval_token": "x"})
    assert unknown.code == 400 and unknown.body["code"] == "unknown_field"
    bad_id = await api("POST", ROUTE, {"language": "python", "code": "1", "run_id": "run_1"})
    assert bad_id.code == 400
    assert await settled(jp_serverapp, events) == []


async def test_delete_stops_it_and_the_envelope_says_so(
    api: Api, client: httpx.AsyncClient, jp_serverapp: Any, events: list[Any]
) -> None:
    marker = new_marker()
    run_id = new_run_id()
    body = {"language": "python", "code": sleeper(marker), "confirm": True, "run_id": run_id}
    lines: list[dict[str, Any]] = []
    started = time.monotonic()
    async with (
        client,
        client.stream("POST", ROUTE, json=body, headers={"Accept": NDJSON}) as answer,
    ):
        async for text in answer.aiter_lines():
            if not text.strip():
                continue
            lines.append(json.loads(text))
            if lines[-1]["type"] == "stdout":
                assert appears(marker), "the snippet's child should be running"
                stop = await api("DELETE", f"api/sandbox/runs/{run_id}")
                assert stop.code == 200 and stop.body == {"run_id": run_id, "cancelled": True}
    result = lines[-1]["result"]
    assert result["cancelled"] is True and result["run_id"] == run_id
    assert result["stdout"] == "started\n"
    assert time.monotonic() - started < 30
    assert await gone(marker)
    kinds = await settled(jp_serverapp, events)
    assert kinds == ["plan", "approve", "cancel", "run"]


async def test_closing_the_stream_stops_it_on_the_server(
    client: httpx.AsyncClient, jp_serverapp: Any, events: list[Any]
) -> None:
    marker = new_marker()
    body = {"language": "python", "code": sleeper(marker), "confirm": True}
    async with (
        client,
        client.stream("POST", ROUTE, json=body, headers={"Accept": NDJSON}) as answer,
    ):
        async for text in answer.aiter_lines():
            if text.strip() and json.loads(text)["type"] == "stdout":
                break  # the kernel's stop button: the client hangs up
    assert await gone(marker), "the snippet kept running after its client went away"
    for _ in range(50):
        if "run" in await settled(jp_serverapp, events):
            break
        await asyncio.sleep(0.1)
    run = [data for kind, data in events if kind == "run"]
    assert run and run[0]["cancelled"] is True
