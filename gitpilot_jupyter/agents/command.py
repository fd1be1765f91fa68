"""``jupyter sandbox mcp``: the agents' MCP server as a command of the CLI.

The agents face owns this command; the CLI never imports the agents. The
composition root (:mod:`gitpilot_jupyter.wiring`) adds it to ``jupyter sandbox``
through the CLI's ``register(subparsers)`` protocol.
"""

from __future__ import annotations

import argparse
import os
import sys

from ..client.server import TOKEN_ENV, URL_ENV
from .approval import APPROVAL_MODES
from .render import MODEL_OUTPUT_BYTES


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``mcp``."""
    p = subparsers.add_parser(
        "mcp",
        help="serve run_in_sandbox / run_command / the sessions' tools / sandbox_status to "
        "an MCP client (stdio)",
        description="An MCP server on stdin/stdout. Plans go to the Jupyter server named by "
        f"{URL_ENV} / {TOKEN_ENV} (or found running), where a person approves them; without "
        "one they stay in this process.",
    )
    p.add_argument(
        "--approval",
        choices=APPROVAL_MODES,
        help="ask (a person approves each run), auto (the agent approves its own runs) or "
        "deny (default: $GITPILOT_AGENT_APPROVAL, else ask)",
    )
    p.add_argument(
        "--server",
        default=None,
        help="auto (default), local (in-process, no Jupyter server) or a Jupyter server URL "
        f"(its token from ${TOKEN_ENV})",
    )
    p.add_argument(
        "--approval-wait",
        type=float,
        default=0.0,
        metavar="SEC",
        help="in ask mode, how long a run call waits for the approval before answering "
        "'pending' (default 0)",
    )
    p.add_argument(
        "--approve-in-client",
        action="store_true",
        help="in ask mode, ask the MCP client's user to approve each plan (an MCP elicitation "
        "prompt) when the client supports it; use only with clients that show such prompts "
        "to you rather than answering them themselves",
    )
    p.add_argument(
        "--max-output-bytes",
        type=int,
        default=MODEL_OUTPUT_BYTES,
        metavar="N",
        help=f"bytes of each stream the model sees, head and tail (default {MODEL_OUTPUT_BYTES})",
    )
    p.set_defaults(handler=cmd_mcp)


def cmd_mcp(args: argparse.Namespace) -> int:
    """``jupyter sandbox mcp``: serve the tools on stdio until the client disconnects."""
    try:
        from .mcp_server import serve_stdio
    except ImportError as exc:
        print(
            f"error: the MCP server needs the mcp package ({exc}); "
            "install it with: pip install 'gitpilot-jupyter[agents]'",
            file=sys.stderr,
        )
        return 1
    from .tools import AgentSandbox

    agent = AgentSandbox(
        approval=args.approval,
        server=args.server,
        token=os.environ.get(TOKEN_ENV) if args.server else None,
        approval_wait_sec=args.approval_wait,
        max_output_bytes=args.max_output_bytes,
    )

    async def serve() -> None:
        client = await agent.client()
        where = "in this process (no Jupyter server)" if client.in_process else client.where
        # stdout is the MCP channel: everything for people goes to stderr.
        print(
            f"gitpilot sandbox MCP server: approval {agent.mode} ({agent.mode_source}); "
            f"plans go {'to ' + where if not client.in_process else where}",
            file=sys.stderr,
        )
        if agent.mode == "ask" and client.in_process and not args.approve_in_client:
            print(
                "warning: in ask mode without a Jupyter server nobody can approve the agent's "
                f"plans; start JupyterLab (or set {URL_ENV}/{TOKEN_ENV}), or use "
                "--approve-in-client or --approval auto",
                file=sys.stderr,
            )
        await serve_stdio(agent, approve_in_client=args.approve_in_client)

    import anyio

    anyio.run(serve)
    return 0
