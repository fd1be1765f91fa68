"""Agents through a real Jupyter server: plans a person approves from the CLI or the REST API."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gitpilot_jupyter.agents import AgentSandbox
from tests.support.live_server import LiveServer

JUPYTER = str(Path(sys.executable).with_name("jupyter"))


def cli(live: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    """``jupyter sandbox ARGS`` pointed at ``live`` through the env vars, as a person would."""
    env = {
        **os.environ,
        "GITPILOT_JUPYTER_URL": live.url,
        "GITPILOT_JUPYTER_TOKEN": live.token,
    }
    return subprocess.run(
        [JUPYTER, "sandbox", *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def agent(live: LiveServer) -> AgentSandbox:
    return AgentSandbox(approval="ask", server=live.url, token=live.token)


def test_ask_plan_shows_on_the_server_and_runs_after_cli_approval(
    live: LiveServer, agent: AgentSandbox
) -> None:
    reply = agent.run_in_sandbox("python", "print('hello from the agent')")
    assert reply.status == "approval_pending"
    plan_id = reply.plan_id or ""
    assert f"jupyter sandbox approve {plan_id}" in reply.text
    assert live.url in reply.text

    with live.client() as http:
        pending = http.get("/api/sandbox/plans").json()["plans"]
    mine = [p for p in pending if p["plan_id"] == plan_id]
    assert mine and mine[0]["source"] == "agent"

    listing = cli(live, "plans")
    assert listing.returncode == 0, (listing.stdout, listing.stderr)
    assert plan_id in listing.stdout
    assert "print('hello from the agent')" in listing.stdout
    assert "requested by an agent" in listing.stdout

    approved = cli(live, "approve", plan_id)
    assert approved.returncode == 0, (approved.stdout, approved.stderr)
    assert f"Approved {plan_id}" in approved.stdout
    assert "approval_token" not in approved.stdout

    done = agent.wait_for_approval(plan_id, 10)
    assert done.status == "completed" and done.ok, done.text
    assert "hello from the agent" in done.text


def test_approval_from_the_rest_api_reaches_the_waiting_agent(
    live: LiveServer, agent: AgentSandbox
) -> None:
    reply = agent.run_command("echo approved-in-the-lab")
    with live.client() as http:
        answer = http.post("/api/sandbox/approve", json={"plan_id": reply.plan_id})
    assert answer.status_code == 200
    done = agent.wait_for_approval(reply.plan_id or "", 10)
    assert done.ok and "approved-in-the-lab" in done.text


def test_cli_reject_ends_the_wait_without_a_run(live: LiveServer, agent: AgentSandbox) -> None:
    reply = agent.run_command("echo never")
    rejected = cli(live, "reject", reply.plan_id or "")
    assert rejected.returncode == 0, rejected.stderr
    answer = agent.wait_for_approval(reply.plan_id or "", 10)
    assert answer.status == "not_approved"
    assert "Nothing was run" in answer.text


def test_only_the_planner_can_claim_the_token(live: LiveServer, agent: AgentSandbox) -> None:
    reply = agent.run_command("echo mine")
    with live.client() as http:
        stolen = http.post(
            "/api/sandbox/agent/claim", json={"plan_id": reply.plan_id, "claim": "guess"}
        )
        assert stolen.status_code == 403
        assert stolen.json()["code"] == "claim_invalid"
        assert http.post("/api/sandbox/approve", json={"plan_id": reply.plan_id}).is_success
    assert agent.wait_for_approval(reply.plan_id or "", 10).ok


def test_auto_runs_through_the_server(live: LiveServer) -> None:
    sandbox = AgentSandbox(approval="auto", server=live.url, token=live.token)
    reply = sandbox.run_in_sandbox("python", "import sys; print(sys.argv[0])")
    assert reply.ok, reply.text
    with live.client() as http:
        pending = http.get("/api/sandbox/plans").json()["plans"]
    assert reply.plan_id not in [p["plan_id"] for p in pending]


def test_blocked_command_through_the_server_is_refused(live: LiveServer) -> None:
    reply = AgentSandbox(approval="auto", server=live.url, token=live.token).run_command(
        "mkfs /dev/sda"
    )
    assert reply.status == "refused" and "mkfs" in reply.text


def test_wrong_token_is_an_error_not_a_run(live: LiveServer) -> None:
    reply = AgentSandbox(approval="auto", server=live.url, token="wrong").run_command("true")
    assert reply.status == "error"
    assert reply.error_code is not None


def test_a_running_server_is_found_from_its_runtime_file(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", live.env["JUPYTER_RUNTIME_DIR"])
    status = AgentSandbox(approval="ask").status()
    assert status.status == "completed"
    assert f"Connected to: {live.url}/" in status.text


def test_cli_without_a_server_says_how_to_name_one() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITPILOT_JUPYTER")}
    done = subprocess.run(
        [JUPYTER, "sandbox", "approve", "plan_0123456789abcdef"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1  # the server is unavailable: a failure, not a usage error
    assert "GITPILOT_JUPYTER_URL" in done.stderr


def test_unreachable_server_is_reported() -> None:
    reply = AgentSandbox(approval="auto", server="http://127.0.0.1:9").run_command("true")
    assert reply.status == "error" and reply.error_code == "server_unreachable"


def test_plans_and_approve_print_hostile_code_escaped_and_counted(live: LiveServer) -> None:
    """What a terminal gets from ``plans`` / ``approve`` cannot hide or reorder the code."""
    code = (
        "print('harmless')\x1b[2K\x1b[1Gprint('also harmless')\r\n"
        "x = 1  # \u202eevil\u202c\n"
        + "".join(f"print({i})\n" for i in range(45))
        + "import importlib; importlib.import_module('o' + 's').system('id')\n"
    )
    with live.client() as http:
        body = {"language": "python", "code": code}  # an agent's plan waits for a person
        plan = http.post("/api/sandbox/agent/plan", json=body).json()
    plan_id = plan["plan"]["plan_id"]
    for args in (("plans",), ("approve", plan_id)):
        shown = cli(live, *args)
        assert shown.returncode == 0, shown.stderr
        out = shown.stdout
        assert not any(c in out for c in ("\x1b", "\r", "\u202e", "\u202c")), out
        assert "print('harmless')\\x1b[2K\\x1b[1Gprint('also harmless')\\x0d" in out
        assert "8 more lines not shown (the code has 48)" in out
        assert "5 hidden or look-alike characters shown as escapes" in out
        assert plan["plan"]["digest"] in out
        assert "warning (high): dynamic import" in out
