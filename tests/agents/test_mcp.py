"""A real MCP client session over stdio against ``jupyter sandbox mcp``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientRequestContext, ClientSession, ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult

from tests.support.live_server import LiveServer

JUPYTER = str(Path(sys.executable).with_name("jupyter"))
#: Seconds a whole session may take on a loaded machine (server start included).
SESSION_TIMEOUT = 180

Scenario = Callable[[ClientSession], Awaitable[None]]


def run_session(
    args: list[str],
    env: dict[str, str],
    scenario: Scenario,
    elicitation: ElicitationFnT | None = None,
    cwd: Path | None = None,
) -> None:
    """Start ``jupyter sandbox mcp ARGS`` (in ``cwd``), initialise a client session, play
    ``scenario``."""
    child_env = {
        "GITPILOT_CONFIG_DIR": os.environ["GITPILOT_CONFIG_DIR"],
        "JUPYTER_RUNTIME_DIR": os.environ["JUPYTER_RUNTIME_DIR"],
        # The code under test, where a checkout is put first on the path (a worktree).
        **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
        **env,
    }
    params = StdioServerParameters(
        command=JUPYTER, args=["sandbox", "mcp", *args], env=child_env, cwd=cwd
    )

    async def main() -> None:
        with anyio.fail_after(SESSION_TIMEOUT):
            async with (
                stdio_client(params) as (read, write),
                ClientSession(read, write, elicitation_callback=elicitation) as session,
            ):
                await session.initialize()
                await scenario(session)

    anyio.run(main)


def text_of(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def envelope(result: CallToolResult) -> dict[str, Any]:
    structured = result.structured_content
    assert isinstance(structured, dict)
    return structured


def test_tools_run_code_and_refuse_destructive_commands() -> None:
    async def scenario(session: ClientSession) -> None:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert {"run_in_sandbox", "run_command", "sandbox_status", "wait_for_approval"} <= set(
            tools
        )
        assert "language" in tools["run_in_sandbox"].input_schema["properties"]

        ran = await session.call_tool("run_in_sandbox", {"language": "py", "code": "print(6*7)"})
        assert not ran.is_error
        assert "Exit code: 0" in text_of(ran)
        assert "--- stdout ---\n42" in text_of(ran)
        assert envelope(ran)["result"]["stdout"] == "42\n"

        refused = await session.call_tool("run_command", {"command": "rm -rf /"})
        assert refused.is_error
        assert "Refused by policy" in text_of(refused)
        assert envelope(refused)["status"] == "refused"

        big = await session.call_tool(
            "run_in_sandbox", {"language": "python", "code": "print('x' * 50_000); print('END')"}
        )
        assert "bytes left out" in text_of(big) and "END" in text_of(big)
        shortened = envelope(big)["result"]["stdout"]
        assert "bytes left out" in shortened and len(shortened) < 1200

        status = await session.call_tool("sandbox_status", {})
        assert "Agent approval mode: auto" in text_of(status)
        assert "Connected to: in-process" in text_of(status)

    run_session(
        ["--approval", "auto", "--server", "local", "--max-output-bytes", "1000"], {}, scenario
    )


def test_agent_loop_reads_a_syntax_error_and_fixes_it() -> None:
    """What an agent does: run, read the structured failure, correct the code, run again."""

    async def scenario(session: ClientSession) -> None:
        code = "def area(r):\n    return 3.14159 * r ** 2\n\nprint(round(area(2), 2)\n"
        first = await session.call_tool("run_in_sandbox", {"language": "python", "code": code})
        result = envelope(first)["result"]
        assert result["exit_code"] == 1
        assert "SyntaxError" in result["stderr"]
        assert "Exit code: 1" in text_of(first) and "SyntaxError" in text_of(first)

        # The "agent" reads the failing line from the traceback and closes the parenthesis.
        where = re.search(r'File ".*", line (\d+)', result["stderr"])
        assert where is not None
        line = int(where.group(1))
        lines = code.splitlines()
        lines[line - 1] += ")"
        fixed = "\n".join(lines) + "\n"
        second = await session.call_tool("run_in_sandbox", {"language": "python", "code": fixed})
        assert envelope(second)["ok"] is True
        assert envelope(second)["result"]["stdout"] == "12.57\n"

    run_session([], {"GITPILOT_AGENT_APPROVAL": "auto", "GITPILOT_JUPYTER_URL": "local"}, scenario)


def test_deny_mode_from_the_environment_is_honoured() -> None:
    async def scenario(session: ClientSession) -> None:
        denied = await session.call_tool("run_command", {"command": "echo hi"})
        assert denied.is_error
        assert "switched off for agents" in text_of(denied)

    run_session(["--server", "local"], {"GITPILOT_AGENT_APPROVAL": "deny"}, scenario)


def test_ask_mode_plan_is_approved_by_a_person_on_the_jupyter_server(live: LiveServer) -> None:
    server_env = {"GITPILOT_JUPYTER_URL": live.url, "GITPILOT_JUPYTER_TOKEN": live.token}

    async def scenario(session: ClientSession) -> None:
        asked = await session.call_tool(
            "run_in_sandbox", {"language": "python", "code": "print('approved by a person')"}
        )
        assert not asked.is_error
        assert "Approval needed" in text_of(asked)
        plan_id = envelope(asked)["plan_id"]

        approve = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [JUPYTER, "sandbox", "approve", plan_id],
                env={**os.environ, **server_env},
                capture_output=True,
                text=True,
                timeout=120,
            )
        )
        assert approve.returncode == 0, approve.stderr

        done = await session.call_tool("wait_for_approval", {"plan_id": plan_id, "wait_sec": 30})
        assert not done.is_error
        assert "approved by a person" in text_of(done)
        assert envelope(done)["ok"] is True

    run_session([], server_env, scenario)


def test_approve_in_client_asks_the_clients_user() -> None:
    """Without a Jupyter server, --approve-in-client asks the person through the MCP client."""
    prompts: list[str] = []

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        prompts.append(params.message)
        yes = "print('yes please')" in params.message
        return ElicitResult(action="accept", content={"approve": yes})

    async def scenario(session: ClientSession) -> None:
        ran = await session.call_tool(
            "run_in_sandbox", {"language": "python", "code": "print('yes please')"}
        )
        assert not ran.is_error and envelope(ran)["ok"] is True
        assert "yes please" in text_of(ran)

        said_no = await session.call_tool("run_command", {"command": "echo no thanks"})
        assert said_no.is_error
        assert envelope(said_no)["status"] == "not_approved"
        assert "Nothing was run" in text_of(said_no)

    run_session(["--server", "local", "--approve-in-client"], {}, scenario, person)
    assert len(prompts) == 2
    assert "An agent asks to run this python code" in prompts[0]
    assert "digest sha256:" in prompts[0]


def test_the_client_prompt_shows_hostile_code_escaped_and_counted() -> None:
    prompts: list[str] = []

    async def person(context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        prompts.append(params.message)
        return ElicitResult(action="accept", content={"approve": False})

    code = "print('ok')\x1b[2K\x1b[1G\n" + "pass\n" * 50 + "__import__('os').system('id')\n"

    async def scenario(session: ClientSession) -> None:
        said_no = await session.call_tool("run_in_sandbox", {"language": "python", "code": code})
        assert envelope(said_no)["status"] == "not_approved"

    run_session(["--server", "local", "--approve-in-client"], {}, scenario, person)
    (prompt,) = prompts
    assert "\x1b" not in prompt and "print('ok')\\x1b[2K\\x1b[1G" in prompt
    assert "12 more lines not shown (the code has 52)" in prompt
    assert "dynamic import" in prompt
