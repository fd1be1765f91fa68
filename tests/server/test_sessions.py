"""``/api/sandbox/sessions`` on a real server: a session's cells planned, approved and run
by token keep their state, and another identity can neither list, drive nor stop them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.results import new_run_id
from tests.support.system import require_system

from .helpers import NDJSON, Api, check_stream_line
from .test_auth import XSRF, HeaderIdentityProvider, server_config
from .test_cancel import new_marker, processes_with

XSRF_HEADERS = {"Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF}
ALICE = {"X-Test-User": "alice", **XSRF_HEADERS}
BOB = {"X-Test-User": "bob", **XSRF_HEADERS}


@pytest.fixture
def jp_server_config() -> Any:
    config = server_config()
    config.ServerApp.identity_provider_class = HeaderIdentityProvider
    return config


async def start(api: Api, name: str, who: dict[str, str]) -> dict[str, Any]:
    answer = await api("POST", "api/sandbox/sessions", {"name": name}, headers=who)
    if answer.code == 409 and answer.body.get("code") == "session_unavailable":
        require_system("bwrap", False, answer.body["message"])
    assert answer.code == 201, answer.text
    return dict(answer.body)


async def cell(
    api: Api, who: dict[str, str], session: str, code: str, *, stream: bool = False
) -> Any:
    """Plan, approve and run one cell of ``session`` by its token (as a face does)."""
    plan = await api(
        "POST",
        "api/sandbox/plan",
        {"language": "python", "code": code, "session": session},
        headers=who,
    )
    assert plan.code == 200, plan.text
    approval = await api(
        "POST", "api/sandbox/approve", {"plan_id": plan.body["plan"]["plan_id"]}, headers=who
    )
    token = approval.body["approval_token"]
    headers = {**who, "Accept": NDJSON} if stream else who
    ran = await api("POST", "api/sandbox/run", {"approval_token": token}, headers=headers)
    assert ran.code == 200, ran.text
    return ran.body


async def test_state_persists_across_two_cells_over_rest_and_streams(api: Api) -> None:
    info = await start(api, "nb", ALICE)
    assert (info["name"], info["owner"], info["state"]) == ("nb", "alice", "idle")
    first = await cell(api, ALICE, "nb", "import math\nx = 41")
    assert first["exit_code"] == 0
    lines = await cell(api, ALICE, "nb", "print(x + 1, math.pi > 3)", stream=True)
    for line in lines:
        check_stream_line(line, "RunResult")
    assert {"type": "stdout", "data": "42 True\n"} in lines
    assert lines[-1]["type"] == "result" and lines[-1]["exit_code"] == 0
    listed = await api("GET", "api/sandbox/sessions", headers=ALICE)
    assert [(s["name"], s["cells"]) for s in listed.body["sessions"]] == [("nb", 2)]
    # Restart: the same session, its state gone.
    restarted = await api("POST", "api/sandbox/sessions/nb/restart", headers=ALICE)
    assert restarted.code == 200 and restarted.body["cells"] == 0
    gone = await cell(api, ALICE, "nb", "print(x)")
    assert "NameError" in gone["stderr"] + gone["stdout"]
    stopped = await api("DELETE", "api/sandbox/sessions/nb", headers=ALICE)
    assert stopped.code == 200
    assert (await api("GET", "api/sandbox/sessions", headers=ALICE)).body["sessions"] == []
    again = await api("DELETE", "api/sandbox/sessions/nb", headers=ALICE)
    assert (again.code, again.body["code"]) == (404, "session_not_found")


async def test_another_user_cannot_list_drive_or_stop_a_session(api: Api) -> None:
    await start(api, "nb", ALICE)
    await cell(api, ALICE, "nb", "secret = 'alice'")
    assert (await api("GET", "api/sandbox/sessions", headers=BOB)).body["sessions"] == []
    for method, path in (
        ("DELETE", "api/sandbox/sessions/nb"),
        ("POST", "api/sandbox/sessions/nb/restart"),
        ("POST", "api/sandbox/sessions/nb/interrupt"),
    ):
        answer = await api(method, path, headers=BOB)
        assert (answer.code, answer.body["code"]) == (404, "session_not_found"), path
    # Bob's cell of that name runs in his own session, which cannot see Alice's state.
    bobs = await cell(api, BOB, "nb", "print('secret' in dir())")
    assert bobs["stdout"] == "False\n"
    alices = await cell(api, ALICE, "nb", "print(secret)")
    assert alices["stdout"] == "alice\n"
    twice = await api("POST", "api/sandbox/sessions", {"name": "nb"}, headers=ALICE)
    assert (twice.code, twice.body["code"]) == (409, "session_exists")
    bad = await api("POST", "api/sandbox/sessions", {"name": "../x"}, headers=ALICE)
    assert bad.code == 400


async def test_delete_run_interrupts_a_session_cell_and_the_session_lives_on(
    api: Api, events: list[tuple[str, dict[str, Any]]]
) -> None:
    await start(api, "nb", ALICE)
    assert (await cell(api, ALICE, "nb", "x = 41"))["exit_code"] == 0
    marker = new_marker()
    code = (
        "import subprocess, time\n"
        f"child = subprocess.Popen(['sleep', '{marker}'])\n"
        "time.sleep(60)\n"
        "print('never printed')\n"
    )
    plan = await api(
        "POST",
        "api/sandbox/plan",
        {"language": "python", "code": code, "session": "nb"},
        headers=ALICE,
    )
    assert plan.body["plan"]["session"] == "nb"
    approval = await api(
        "POST", "api/sandbox/approve", {"plan_id": plan.body["plan"]["plan_id"]}, headers=ALICE
    )
    run_id = new_run_id()
    body = {"approval_token": approval.body["approval_token"], "run_id": run_id}
    running = asyncio.ensure_future(api("POST", "api/sandbox/run", body, headers=ALICE))
    deadline = time.monotonic() + 30
    while not processes_with(marker):  # the cell is under way in the kernel
        assert time.monotonic() < deadline and not running.done(), "the cell never started"
        await asyncio.sleep(0.05)
    # Someone else's Stop finds no such run; the owner's interrupts the cell.
    other = await api("DELETE", f"api/sandbox/runs/{run_id}", headers=BOB)
    assert (other.code, other.body["code"]) == (404, "run_not_found")
    asked = time.monotonic()
    stop = await api("DELETE", f"api/sandbox/runs/{run_id}", headers=ALICE)
    assert stop.code == 200, stop.text
    assert stop.body == {"run_id": run_id, "cancelled": True, "session": "nb"}
    result = (await running).body
    took = time.monotonic() - asked
    assert took < 3.0, f"the cell took {took:.2f} s to stop"
    assert result["cancelled"] is True and result["timed_out"] is False
    assert result["run_id"] == run_id and "never printed" not in result["stdout"]
    assert "KeyboardInterrupt" in result["stderr"]
    assert any("session nb keeps its kernel and its state" in n for n in result["notes"])
    # The same kernel, its state kept: the next cell sees what the earlier ones made.
    after = await cell(api, ALICE, "nb", "child.kill(); child.wait()\nprint(x + 1)")
    assert (after["exit_code"], after["stdout"]) == (0, "42\n")
    listed = (await api("GET", "api/sandbox/sessions", headers=ALICE)).body["sessions"]
    assert [(s["name"], s["cells"]) for s in listed] == [("nb", 3)]
    cancels = [data for kind, data in events if kind == "cancel"]
    assert [c["run_id"] for c in cancels] == [run_id]
    await api("DELETE", "api/sandbox/sessions/nb", headers=ALICE)
