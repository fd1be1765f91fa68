"""Agents' sessions: open_session, run_in_session, close_session and list_sessions, each cell
planned and approved as any agent run, in-process, through a real server and over MCP."""

from __future__ import annotations

import base64
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession
from mcp.types import ImageContent

from gitpilot_jupyter.agents import AgentReply, AgentSandbox
from tests.agents.test_mcp import envelope, run_session, text_of
from tests.server.test_cancel import new_marker, processes_with
from tests.support.figures import RED_FIGURE, assert_red_figure, require_matplotlib
from tests.support.inputs import READ_BOTH, READ_BOTH_OUT, make_project
from tests.support.live_server import LiveServer
from tests.support.system import require_system


def opened(agent: AgentSandbox, name: str | None = None) -> AgentReply:
    """``open_session``, which needs the bwrap engine (else skipped, or failed in CI)."""
    reply = agent.open_session(name)
    if reply.error_code == "session_unavailable":
        require_system("bwrap", False, reply.text)
    assert reply.status == "completed", reply.text
    return reply


def test_an_agents_session_keeps_its_state_from_cell_to_cell() -> None:
    agent = AgentSandbox(approval="auto", server="local")
    reply = opened(agent, "work")
    assert "Session work is open" in reply.text and "Nothing has run yet" in reply.text
    assert reply.sessions is not None and reply.sessions[0]["name"] == "work"
    first = agent.run_in_session("work", "import math\nx = 41")
    assert first.ok, first.text
    assert first.plan is not None and first.plan["session"] == "work"
    assert first.plan["goal"] == "Run a python cell (2 lines) in session work"
    second = agent.run_in_session("work", "print(x + 1, math.pi > 3)")
    assert second.ok and "--- stdout ---\n42 True" in second.text, second.text
    assert "Session: work" in second.text
    assert second.to_dict()["result"]["stdout"] == "42 True\n"
    # A cell over its timeout is interrupted; the session and its state stay.
    late = agent.run_in_session("work", "import time\ntime.sleep(30)", timeout_sec=1)
    assert late.result is not None and late.result.timed_out, late.text
    assert "timed out after 1 s; the cell was interrupted" in late.text
    kept = agent.run_in_session("work", "print(x)")
    assert kept.ok and "--- stdout ---\n41" in kept.text, kept.text
    listed = agent.list_sessions()
    assert [(s["name"], s["cells"]) for s in listed.sessions or []] == [("work", 4)]
    assert "- work: idle, 4 cells run" in listed.text
    closed = agent.close_session("work")
    assert closed.status == "completed" and "work is closed" in closed.text
    assert agent.list_sessions().sessions == []
    assert "No session is open" in agent.list_sessions().text
    again = agent.close_session("work")
    assert (again.status, again.error_code) == ("error", "session_not_found")
    # Its state went with it: a new session of that name starts empty.
    fresh = agent.run_in_session("work", "print(x)")
    assert not fresh.ok and "NameError" in fresh.text
    agent.close_session("work")


def test_a_bad_name_is_an_error_and_deny_opens_nothing() -> None:
    agent = AgentSandbox(approval="auto", server="local")
    bad = agent.run_in_session("../x", "print(1)")
    assert (bad.status, bad.error_code) == ("error", "invalid_session")
    assert "Nothing was run" in bad.text
    assert agent.open_session("../x").error_code == "invalid_session"
    denied = AgentSandbox(approval="deny", server="local")
    assert denied.open_session("nope").status == "denied"
    assert denied.run_in_session("nope", "print(1)").status == "denied"
    assert denied.list_sessions().sessions == []


def test_open_session_without_a_name_gives_one() -> None:
    agent = AgentSandbox(approval="auto", server="local")
    reply = opened(agent)
    name = (reply.sessions or [{}])[0]["name"]
    try:
        assert name.startswith("agent-") and f"session: {name}" in reply.text
        assert agent.run_in_session(name, "print('in', 'it')").ok
    finally:
        agent.close_session(name)


@pytest.fixture
def asking(live: LiveServer) -> AgentSandbox:
    return AgentSandbox(approval="ask", server=live.url, token=live.token)


def approve(live: LiveServer, plan_id: str) -> None:
    """A person's approval through the REST API (what JupyterLab's card sends)."""
    with live.client() as http:
        answer = http.post("/api/sandbox/approve", json={"plan_id": plan_id})
    assert answer.status_code == 200, answer.text


def approved_cell(live: LiveServer, agent: AgentSandbox, session: str, code: str) -> AgentReply:
    """An ask-mode cell: planned (pending), approved by a person, then run by the agent."""
    pending = agent.run_in_session(session, code)
    assert pending.status == "approval_pending", pending.text
    approve(live, pending.plan_id or "")
    return agent.wait_for_approval(pending.plan_id or "", 30)


def test_ask_mode_session_cells_wait_for_a_person_through_the_server(
    live: LiveServer, asking: AgentSandbox
) -> None:
    opened(asking, "nb")
    try:
        pending = asking.run_in_session("nb", "y = 6 * 7")
        assert pending.status == "approval_pending", pending.text
        assert "in session nb" in pending.text and "Nothing has run yet" in pending.text
        with live.client() as http:
            plans = http.get("/api/sandbox/plans").json()["plans"]
            (shown,) = [p for p in plans if p["plan_id"] == pending.plan_id]
            assert (shown["source"], shown["session"]) == ("agent", "nb")
            # The person sees the agent's session, which has run nothing yet.
            sessions = http.get("/api/sandbox/sessions").json()["sessions"]
            assert [(s["name"], s["cells"]) for s in sessions] == [("nb", 0)]
        approve(live, pending.plan_id or "")
        done = asking.wait_for_approval(pending.plan_id or "", 30)
        assert done.status == "completed" and done.ok, done.text
        seen = approved_cell(live, asking, "nb", "print(y)")
        assert seen.ok and "--- stdout ---\n42" in seen.text, seen.text
    finally:
        asking.close_session("nb")
    assert asking.list_sessions().sessions == []


def test_stop_from_pending_plans_interrupts_the_agents_cell_and_keeps_the_session(
    live: LiveServer, asking: AgentSandbox
) -> None:
    opened(asking, "long")
    try:
        assert approved_cell(live, asking, "long", "x = 41").ok
        marker = new_marker()
        code = (
            "import subprocess, time\n"
            f"child = subprocess.Popen(['sleep', '{marker}'])\n"
            "time.sleep(60)\n"
        )
        slow = asking.run_in_session("long", code)
        approve(live, slow.plan_id or "")
        replies: list[AgentReply] = []
        waiter = threading.Thread(
            target=lambda: replies.append(asking.wait_for_approval(slow.plan_id or "", 60))
        )
        waiter.start()
        deadline = time.monotonic() + 30
        while not processes_with(marker):
            assert time.monotonic() < deadline, "the cell never started"
            time.sleep(0.05)
        with live.client() as http:
            running = http.get("/api/sandbox/plans").json()["running"]
            (mine,) = [r for r in running if r["plan"]["plan_id"] == slow.plan_id]
            asked = time.monotonic()
            stop = http.delete(f"/api/sandbox/runs/{mine['run_id']}")
        assert stop.json() == {"run_id": mine["run_id"], "cancelled": True, "session": "long"}
        waiter.join(30)
        took = time.monotonic() - asked
        (stopped,) = replies
        assert took < 3.0, f"the cell took {took:.2f} s to stop"
        assert stopped.result is not None and stopped.result.cancelled
        assert "the cell was interrupted" in stopped.text
        assert "session long keeps its kernel and its state" in stopped.text
        seen = approved_cell(live, asking, "long", "child.kill(); child.wait()\nprint(x + 1)")
        assert seen.ok and "--- stdout ---\n42" in seen.text, seen.text
    finally:
        asking.close_session("long")


def test_the_mcp_session_tools_keep_state_and_return_figures() -> None:
    require_matplotlib()

    async def scenario(session: ClientSession) -> None:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert {"open_session", "run_in_session", "close_session", "list_sessions"} <= tools
        opened = await session.call_tool("open_session", {"name": "plots"})
        if "session_unavailable" in text_of(opened):
            require_system("bwrap", False, text_of(opened))
        assert not opened.is_error, text_of(opened)
        assert envelope(opened)["sessions"][0]["name"] == "plots"
        first = await session.call_tool(
            "run_in_session", {"session": "plots", "code": "label = 'drawn'"}
        )
        assert not first.is_error and envelope(first)["plan_id"], text_of(first)
        drawn = await session.call_tool(
            "run_in_session", {"session": "plots", "code": f"print(label)\n{RED_FIGURE}"}
        )
        assert not drawn.is_error, text_of(drawn)
        assert "--- stdout ---\ndrawn" in text_of(drawn)
        images = [block for block in drawn.content if isinstance(block, ImageContent)]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        assert_red_figure(base64.b64decode(images[0].data))
        result: dict[str, Any] = envelope(drawn)["result"]
        assert result["outputs"][0]["data"]["image/png"].endswith(" bytes]")
        listed = await session.call_tool("list_sessions", {})
        assert [(s["name"], s["cells"]) for s in envelope(listed)["sessions"]] == [("plots", 2)]
        closed = await session.call_tool("close_session", {"session": "plots"})
        assert not closed.is_error and "plots is closed" in text_of(closed)
        gone = await session.call_tool("close_session", {"session": "plots"})
        assert gone.is_error and envelope(gone)["error_code"] == "session_not_found"

    run_session(["--approval", "auto", "--server", "local"], {}, scenario)


def test_an_agents_cell_takes_inputs_and_hands_back_its_out_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path / "project")
    monkeypatch.chdir(project)
    agent = AgentSandbox(approval="auto", server="local")
    opened(agent, "data")
    code = (
        READ_BOTH
        + "import os\nos.makedirs('out', exist_ok=True)\nopen('out/total.txt', 'w').write('42')"
    )
    first = agent.run_in_session("data", code, inputs=["sales.csv", "data"])
    assert first.ok, first.text
    assert first.plan is not None
    assert [i["name"] for i in first.plan["inputs"]] == ["sales.csv", "data"]
    result = first.to_dict()["result"]
    assert result["stdout"] == READ_BOTH_OUT
    assert [(f["name"], f["size"]) for f in result["files"]] == [("total.txt", 2)]
    # A later cell still reads them; it wrote nothing new under out/.
    later = agent.run_in_session("data", "print(open('data/notes.txt').read(), end='')")
    assert later.ok and later.to_dict()["result"]["files"] == [], later.text
    outside = agent.run_in_session("data", "pass", inputs=["../elsewhere.csv"])
    assert (outside.status, outside.error_code) == ("error", "invalid_input"), outside.text
    agent.close_session("data")


def test_the_mcp_run_in_session_takes_inputs(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")

    async def scenario(session: ClientSession) -> None:
        opened = await session.call_tool("open_session", {"name": "files"})
        if "session_unavailable" in text_of(opened):
            require_system("bwrap", False, text_of(opened))
        ran = await session.call_tool(
            "run_in_session",
            {"session": "files", "code": READ_BOTH, "inputs": ["sales.csv", "data"]},
        )
        assert not ran.is_error, text_of(ran)
        assert envelope(ran)["result"]["stdout"] == READ_BOTH_OUT
        await session.call_tool("close_session", {"session": "files"})

    run_session(["--approval", "auto", "--server", "local"], {}, scenario, cwd=project)
