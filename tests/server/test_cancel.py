"""Stopping a run on a real server: DELETE /runs/{run_id}, or closing the stream.

Each snippet starts a child ``sleep`` with a unique argument; a stopped run must
leave no such process behind (the snippet is killed on the server, not only
forgotten by the client), answer ``cancelled: true`` and keep its output so far.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from pathlib import Path
from typing import Any

import httpx

from gitpilot_jupyter.sandbox.results import new_run_id

from .helpers import NDJSON, Api, check_stream_line, plan_and_approve


def sleeper(marker: str) -> str:
    """A snippet that prints, leaves a child ``sleep <marker>`` and waits a long time."""
    return (
        "import subprocess, time\n"
        f"subprocess.Popen(['sleep', '{marker}'])\n"
        "print('started', flush=True)\n"
        "time.sleep(60)\n"
        "print('never printed')\n"
    )


def new_marker() -> str:
    """A sleep duration nobody else uses, to find the snippet's child in /proc."""
    return f"{400 + secrets.randbelow(500)}.{secrets.randbelow(10**6):06d}"


def processes_with(marker: str) -> list[int]:
    """Pids whose command line holds ``marker`` (the snippet's child)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry.name))
    return found


def appears(marker: str, within: float = 10.0) -> bool:
    """True once a process holds ``marker`` (a loaded machine may take a moment to show it)."""
    deadline = time.monotonic() + within
    while not processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


async def gone(marker: str, within: float = 10.0) -> bool:
    """True once no process holds ``marker`` (a killed tree takes a moment to be reaped)."""
    deadline = time.monotonic() + within
    while processes_with(marker):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def approved_sleeper(api: Api) -> tuple[str, dict[str, Any]]:
    """An approved :func:`sleeper`: its marker and the run body naming its own run id."""
    marker = new_marker()
    code = sleeper(marker)
    _, token = await plan_and_approve(api, language="python", code=code)
    body = {"language": "python", "code": code, "approval_token": token, "run_id": new_run_id()}
    return marker, body


async def running_sleeper(client: httpx.AsyncClient, marker: str, body: dict[str, Any]) -> Any:
    """The plain JSON run of ``body`` (a future), once its snippet has started."""
    running = asyncio.ensure_future(client.post("api/sandbox/run", json=body))
    deadline = time.monotonic() + 30
    while not processes_with(marker):
        assert time.monotonic() < deadline, "the snippet never started"
        await asyncio.sleep(0.1)
    return running


async def test_delete_stops_a_streaming_run_and_its_envelope_says_so(
    api: Api,
    client: httpx.AsyncClient,
    jp_serverapp: Any,
    events: list[tuple[str, dict[str, Any]]],
) -> None:
    marker, body = await approved_sleeper(api)
    run_id = body["run_id"]
    lines: list[dict[str, Any]] = []
    started = time.monotonic()
    async with (
        client,
        client.stream("POST", "api/sandbox/run", json=body, headers={"Accept": NDJSON}) as answer,
    ):
        async for text in answer.aiter_lines():
            if not text.strip():
                continue
            line = json.loads(text)
            check_stream_line(line, "RunResult")
            lines.append(line)
            if line["type"] == "stdout":
                assert appears(marker), "the snippet's child should be running"
                stop = await api("DELETE", f"api/sandbox/runs/{run_id}")
                assert stop.code == 200 and stop.body == {"run_id": run_id, "cancelled": True}
    result = lines[-1]
    assert result["type"] == "result" and result["run_id"] == run_id
    assert result["cancelled"] is True and result["timed_out"] is False
    assert result["exit_code"] == -1
    assert result["stdout"] == "started\n"  # the output so far is kept
    assert time.monotonic() - started < 30  # not the 60 s sleep, nor the 120 s timeout
    assert await gone(marker)
    await jp_serverapp.event_logger.gather_listeners()
    kinds = [kind for kind, _ in events]
    assert kinds[-2:] == ["cancel", "run"]
    assert events[-2][1]["run_id"] == run_id and events[-1][1]["cancelled"] is True
    # Over now: a second stop finds nothing to stop.
    again = await api("DELETE", f"api/sandbox/runs/{run_id}")
    assert again.code == 404 and again.body["code"] == "run_not_found"


async def test_closing_the_stream_stops_the_run_on_the_server(
    api: Api, client: httpx.AsyncClient, jp_serverapp: Any, events: list[Any]
) -> None:
    marker = new_marker()
    code = sleeper(marker)
    _, token = await plan_and_approve(api, language="python", code=code)
    body = {"language": "python", "code": code, "approval_token": token}
    async with (
        client,
        client.stream("POST", "api/sandbox/run", json=body, headers={"Accept": NDJSON}) as answer,
    ):
        async for text in answer.aiter_lines():
            if text.strip() and json.loads(text)["type"] == "stdout":
                break  # the user pressed Stop: the client hangs up
    assert await gone(marker), "the snippet kept running after its client went away"
    for _ in range(50):
        await jp_serverapp.event_logger.gather_listeners()
        if any(kind == "run" for kind, _ in events):
            break
        await asyncio.sleep(0.1)
    run = [data for kind, data in events if kind == "run"]
    assert run and run[0]["cancelled"] is True and run[0]["exit_code"] == -1


async def test_a_plain_json_run_stopped_from_another_request(
    api: Api, client: httpx.AsyncClient
) -> None:
    marker, body = await approved_sleeper(api)
    run_id = body["run_id"]
    async with client:
        running = await running_sleeper(client, marker, body)
        # The same id cannot start a second run while this one is under way.
        _, token2 = await plan_and_approve(api, language="python", code="print(1)")
        clash = await api(
            "POST",
            "api/sandbox/run",
            {"language": "python", "code": "print(1)", "approval_token": token2, "run_id": run_id},
        )
        assert clash.code == 400 and clash.body["code"] == "run_id_in_use"
        stop = await api("DELETE", f"api/sandbox/runs/{run_id}")
        assert stop.code == 200
        answer = await running
    envelope = answer.json()
    assert envelope["cancelled"] is True and envelope["stdout"] == "started\n"
    assert await gone(marker)


async def test_stopping_an_unknown_run_is_a_404_and_a_bad_run_id_a_400(api: Api) -> None:
    unknown = await api("DELETE", f"api/sandbox/runs/{new_run_id()}")
    assert unknown.code == 404 and unknown.body["code"] == "run_not_found"
    _, token = await plan_and_approve(api, language="python", code="print(1)")
    bad = await api(
        "POST",
        "api/sandbox/run",
        {"language": "python", "code": "print(1)", "approval_token": token, "run_id": "mine"},
    )
    assert bad.code == 400
    # A trailing newline is not part of a run id either (Python's $ would allow it).
    newline = await api(
        "POST",
        "api/sandbox/run",
        {
            "language": "python",
            "code": "print(1)",
            "approval_token": token,
            "run_id": f"{new_run_id()}\n",
        },
    )
    assert newline.code == 400 and newline.body["code"] == "invalid_request", newline.body


async def running_entries(api: Api) -> tuple[list[dict[str, Any]], list[str], int]:
    """GET /plans' ``running`` entries, its waiting ids, and the status's count."""
    listed = await api("GET", "api/sandbox/plans")
    status = await api("GET", "api/sandbox/status")
    waiting = [plan["plan_id"] for plan in listed.body["plans"]]
    return listed.body["running"], waiting, status.body["waiting_plans"]


async def test_an_agents_approved_plan_runs_linked_to_its_plan_until_stopped(
    api: Api, client: httpx.AsyncClient
) -> None:
    marker = new_marker()
    agent = await api(
        "POST", "api/sandbox/agent/plan", {"language": "python", "code": sleeper(marker)}
    )
    plan_id = agent.body["plan"]["plan_id"]
    approval = await api("POST", "api/sandbox/approve", {"plan_id": plan_id})
    assert approval.code == 200
    assert await running_entries(api) == ([], [], 0)  # approved, not yet run: nothing to stop

    async with client:
        # The agent runs its plan by the token alone and names no run id: the server makes one.
        run = asyncio.ensure_future(
            client.post("api/sandbox/run", json={"approval_token": approval.body["approval_token"]})
        )
        deadline = time.monotonic() + 30
        while not processes_with(marker):
            assert time.monotonic() < deadline, "the snippet never started"
            await asyncio.sleep(0.1)
        running, waiting, count = await running_entries(api)
        assert waiting == [] and count == 0  # running is not waiting for anyone's decision
        assert [(r["plan"]["plan_id"], r["state"], r["approved_by"]) for r in running] == [
            (plan_id, "running", "user")
        ]
        run_id = running[0]["run_id"]
        stop = await api("DELETE", f"api/sandbox/runs/{run_id}")
        assert stop.code == 200 and stop.body == {"run_id": run_id, "cancelled": True}
        answer = await run
    envelope = answer.json()
    assert envelope["cancelled"] is True and envelope["run_id"] == run_id
    assert envelope["plan_id"] == plan_id
    assert await gone(marker)
    assert await running_entries(api) == ([], [], 0)  # the entry left when the run ended


async def test_a_run_decided_where_it_was_made_is_not_listed_as_running(
    api: Api, client: httpx.AsyncClient
) -> None:
    marker = new_marker()
    code = sleeper(marker)
    _, token = await plan_and_approve(api, language="python", code=code, source="code_block")
    run_id = new_run_id()
    async with client:
        run = asyncio.ensure_future(
            client.post("api/sandbox/run", json={"approval_token": token, "run_id": run_id})
        )
        deadline = time.monotonic() + 30
        while not processes_with(marker):
            assert time.monotonic() < deadline, "the snippet never started"
            await asyncio.sleep(0.1)
        assert await running_entries(api) == ([], [], 0)
        assert (await api("DELETE", f"api/sandbox/runs/{run_id}")).code == 200
        assert (await run).json()["cancelled"] is True
