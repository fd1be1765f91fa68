"""The sandbox as an MCP server (stdio): ``jupyter sandbox mcp``.

Tools: ``run_in_sandbox``, ``run_command``, ``sandbox_status``,
``wait_for_approval``, and the sessions' ``open_session``, ``run_in_session``,
``close_session`` and ``list_sessions``. Each answers the text rendering a model reads, the run's
images (a matplotlib figure...) as image content, plus the structured reply
(status, plan id, result envelope); refusals, denials and
invalid requests are marked ``isError`` so the model sees it must change course.
Settings, policy and the approval mode are the same as for every other face.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from .._version import __version__
from ..sandbox.display import code_preview
from ..sandbox.plans import ExecutionPlan
from .render import describe_plan
from .tools import AgentReply, AgentSandbox

#: Reply statuses a model must treat as "this did not run": isError in MCP terms.
_ERROR_STATUSES = ("refused", "denied", "not_approved", "error")

INSTRUCTIONS = """\
Run Python, JavaScript or bash in the gitpilot-jupyter sandbox (an isolated, short-lived
process or container) instead of on the user's machine. Read the exit code, stdout and
stderr of each result to fix failures and run again. A python snippet's figures
(matplotlib's plt.show(), display() of an image) come back as images. Depending on the
approval mode a person may have to approve each run first: then the reply says "Approval
needed" with a plan_id, and wait_for_approval(plan_id) runs it once approved. Commands
refused by policy (e.g. rm -rf /) can never be approved: change them instead of retrying.
To work step by step in Python (load data once, then use it in later steps), open_session
starts a kernel that keeps its variables between run_in_session calls; each cell is approved
like any run. close_session ends it.
"""


def _tool_result(reply: AgentReply, limit: int) -> CallToolResult:
    # A figure the snippet drew reaches the model as an image, after the text naming it.
    images = [ImageContent(type="image", data=data, mime_type=mime) for mime, data in reply.images]
    return CallToolResult(
        content=[TextContent(type="text", text=reply.text), *images],
        # Shortened like the text: clients may hand structured content to the model too.
        structured_content=reply.to_dict(limit),
        is_error=reply.status in _ERROR_STATUSES,
    )


class ApprovalAnswer(BaseModel):
    """The form an MCP client shows its user for an ``ask``-mode plan."""

    approve: bool = Field(description="Run this in the sandbox?")


async def _ask_in_client(agent: AgentSandbox, reply: AgentReply, ctx: Context) -> AgentReply:
    """Ask the client's user (MCP elicitation) to approve a pending plan; run or reject it.

    Only called when the server was started with ``--approve-in-client``: the client's
    prompt then counts as the person's approval, so use it only with clients that
    show elicitations to their user rather than answering them by themselves.
    """
    capabilities = ctx.client_capabilities
    if reply.plan is None or capabilities is None or capabilities.elicitation is None:
        return reply
    plan, plan_id = reply.plan, str(reply.plan["plan_id"])
    # The same rule as every approval view: escapes, stated cuts, the digest.
    preview = code_preview(str(plan["code"]))
    message = "\n".join(
        [
            f"An agent asks to run this {plan['language']} code in the sandbox:",
            *describe_plan(ExecutionPlan.from_dict(plan)),
            *preview.lines,
            *(f"! {note}" for note in preview.notes),
            f"digest {plan.get('digest')}",
        ]
    )
    answer = await ctx.elicit(message, ApprovalAnswer)
    if answer.action == "accept" and answer.data.approve:
        await agent.async_approve(plan_id)
    else:
        await agent.async_reject(plan_id)
    return await agent.async_wait_for_approval(plan_id, 5.0)


def _hints(title: str, *, read_only: bool = False) -> ToolAnnotations:
    # Runs happen in a closed sandbox (no network by default): not "open world".
    return ToolAnnotations(title=title, read_only_hint=read_only, open_world_hint=False)


def build_server(
    sandbox: AgentSandbox | None = None, *, approve_in_client: bool = False
) -> MCPServer[Any]:
    """An MCP server whose tools drive ``sandbox`` (default: configured from the environment).

    ``approve_in_client``: in ``ask`` mode, ask the client's user to approve each plan
    through an MCP elicitation (when the client supports it) instead of answering "pending".
    """
    agent = sandbox or AgentSandbox()

    async def settle(reply: AgentReply, ctx: Context) -> CallToolResult:
        if approve_in_client and reply.status == "approval_pending":
            reply = await _ask_in_client(agent, reply, ctx)
        return _tool_result(reply, agent.max_output_bytes)

    server: MCPServer[Any] = MCPServer(
        name="gitpilot-sandbox",
        title="gitpilot-jupyter sandbox",
        instructions=INSTRUCTIONS,
        version=__version__,
    )

    @server.tool(annotations=_hints("Run code in the sandbox"))
    async def run_in_sandbox(
        language: str,
        code: str,
        ctx: Context,
        timeout_sec: int | None = None,
        env: list[str] | None = None,
        inputs: list[str] | None = None,
    ) -> CallToolResult:
        """Run a snippet in the sandbox and return its exit code, duration, stdout and stderr.

        language: python, javascript or bash (aliases: py, js, node, sh, shell).
        timeout_sec: 1..600 seconds (default: the sandbox settings', usually 120).
        env: names of the server's environment variables the snippet needs; only names the
        administrator allows agents (agent_env_allowlist, none by default) are accepted.
        inputs: paths of project files or folders the snippet needs; each appears in its
        folder as ./NAME (read-only where the engine can make it so), listed in the plan.
        """
        reply = await agent.async_run_in_sandbox(language, code, timeout_sec, env, inputs)
        return await settle(reply, ctx)

    @server.tool(annotations=_hints("Run a shell command in the sandbox"))
    async def run_command(
        command: str,
        ctx: Context,
        timeout_sec: int | None = None,
        env: list[str] | None = None,
        inputs: list[str] | None = None,
    ) -> CallToolResult:
        """Run a bash command line in the sandbox (a fresh temporary folder, not the project).

        Returns the exit code, duration, stdout and stderr. Destructive commands are refused.
        env: as for run_in_sandbox (only names the administrator allows agents).
        inputs: as for run_in_sandbox (project files or folders, each as ./NAME).
        """
        reply = await agent.async_run_command(command, timeout_sec, env, inputs)
        return await settle(reply, ctx)

    @server.tool(annotations=_hints("Open a Python session in the sandbox"))
    async def open_session(name: str | None = None) -> CallToolResult:
        """Start a session: a Python kernel in the sandbox whose variables, imports and files
        stay between run_in_session calls (network and limits as the sandbox settings say).

        name: 1 to 64 letters, digits, '.', '_' or '-' (default: a fresh agent-... name).
        Nothing of yours runs yet: each cell is planned and approved like any run.
        """
        return _tool_result(await agent.async_open_session(name), agent.max_output_bytes)

    @server.tool(annotations=_hints("Run a Python cell in a session"))
    async def run_in_session(
        session: str,
        code: str,
        ctx: Context,
        timeout_sec: int | None = None,
        inputs: list[str] | None = None,
    ) -> CallToolResult:
        """Run Python code in an open session; it sees what earlier cells defined.

        Returns the exit code, duration, stdout, stderr, figures and out/ files, as
        run_in_sandbox does (the files this cell wrote or changed under out/).
        session: the name open_session gave. timeout_sec: 1..600 for this cell (on expiry it
        is interrupted and the session keeps its state). inputs: as for run_in_sandbox
        (project files or folders, each as ./NAME in the session's folder from now on).
        """
        reply = await agent.async_run_in_session(session, code, timeout_sec, inputs)
        return await settle(reply, ctx)

    @server.tool(annotations=_hints("Close a session"))
    async def close_session(session: str) -> CallToolResult:
        """Stop a session: its kernel, variables and files are gone."""
        return _tool_result(await agent.async_close_session(session), agent.max_output_bytes)

    @server.tool(annotations=_hints("List the open sessions", read_only=True))
    async def list_sessions() -> CallToolResult:
        """The sessions open for you: name, state (idle or busy), cells run, network."""
        return _tool_result(await agent.async_list_sessions(), agent.max_output_bytes)

    @server.tool(annotations=_hints("Sandbox status", read_only=True))
    async def sandbox_status() -> CallToolResult:
        """The sandbox backend, its health, isolation layers, interpreters and approval mode."""
        return _tool_result(await agent.async_status(), agent.max_output_bytes)

    @server.tool(annotations=_hints("Wait for a person's approval"))
    async def wait_for_approval(plan_id: str, wait_sec: float = 60.0) -> CallToolResult:
        """Wait up to wait_sec seconds for a person to approve plan_id, then run it.

        Use it after a run_in_sandbox or run_command reply that said "Approval needed".
        """
        reply = await agent.async_wait_for_approval(plan_id, wait_sec)
        return _tool_result(reply, agent.max_output_bytes)

    return server


async def serve_stdio(
    sandbox: AgentSandbox | None = None, *, approve_in_client: bool = False
) -> None:
    """Serve the tools over stdin/stdout until the client disconnects."""
    await build_server(sandbox, approve_in_client=approve_in_client).run_stdio_async()
