"""Inputs through the agent tools and the MCP server: the plan names them, the run reads them."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp.client.session import ClientSession

from gitpilot_jupyter.agents import AgentSandbox
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.support.inputs import READ_BOTH, READ_BOTH_OUT, make_project, untouched

from .test_mcp import envelope, run_session, text_of


def test_an_agent_hands_its_snippet_project_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(make_project(tmp_path / "project"))
    sandbox = AgentSandbox(approval="auto", service=SandboxService())
    reply = sandbox.run_in_sandbox("python", READ_BOTH, inputs=["sales.csv", "data"])
    assert reply.status == "completed" and reply.result is not None, reply.text
    assert reply.result.stdout == READ_BOTH_OUT
    assert reply.plan is not None and [i["name"] for i in reply.plan["inputs"]] == [
        "sales.csv",
        "data",
    ]
    shell = sandbox.run_command("wc -l < sales.csv", inputs=["sales.csv"])
    assert shell.result is not None and shell.result.stdout.strip() == "3"
    assert untouched(tmp_path / "project")


def test_an_agent_in_ask_mode_shows_the_inputs_to_its_approver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(make_project(tmp_path / "project"))
    sandbox = AgentSandbox(approval="ask", service=SandboxService(), approval_wait_sec=0)
    reply = sandbox.run_in_sandbox("python", READ_BOTH, inputs=["sales.csv"])
    assert reply.status == "approval_pending" and reply.plan is not None
    labels = [c["label"] for c in reply.plan["checks"]]
    assert any(label.startswith("input sales.csv · 31 B · sha256:") for label in labels)


def test_the_mcp_tool_takes_inputs(tmp_path: Path) -> None:
    project = make_project(tmp_path / "project")

    async def scenario(session: ClientSession) -> None:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert "inputs" in tools["run_in_sandbox"].input_schema["properties"]
        ran = await session.call_tool(
            "run_in_sandbox",
            {"language": "python", "code": READ_BOTH, "inputs": ["sales.csv", "data"]},
        )
        assert not ran.is_error, text_of(ran)
        assert envelope(ran)["result"]["stdout"] == READ_BOTH_OUT

    run_session(["--approval", "auto", "--server", "local"], {}, scenario, cwd=project)
    assert untouched(project)
