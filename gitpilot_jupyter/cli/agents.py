"""Agent commands: ``mcp`` (the MCP server), ``plans``, ``approve`` and ``reject``.

``plans`` / ``approve`` / ``reject`` act on the pending plans of a running
Jupyter server (the one agents plan through), found from
``GITPILOT_JUPYTER_URL`` / ``GITPILOT_JUPYTER_TOKEN`` or the server runtime files.
Plans made by an agent running without a server live only in that agent's
process; no other process can approve them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..agents.approval import APPROVAL_MODES
from ..agents.render import MODEL_OUTPUT_BYTES
from ..client.rest import RestClient
from ..client.server import TOKEN_ENV, URL_ENV, discover_server
from ..sandbox.errors import ServerUnreachable
from ..sandbox.plans import AGENT_SOURCE, ExecutionPlan
from ..sandbox.sync import run_sync
from .render import print_plan, print_plan_code


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``mcp``, ``plans``, ``approve`` and ``reject``."""
    p = subparsers.add_parser(
        "mcp",
        help="serve run_in_sandbox / run_command / sandbox_status to an MCP client (stdio)",
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

    for name, helptext in (
        ("plans", "list the plans waiting for approval on the Jupyter server"),
        ("approve", "approve a pending plan (e.g. an agent's) on the Jupyter server"),
        ("reject", "reject a pending plan on the Jupyter server; it never runs"),
    ):
        p = subparsers.add_parser(name, help=helptext)
        if name != "plans":
            p.add_argument("plan_id", metavar="PLAN_ID")
        p.add_argument(
            "--server",
            help=f"the Jupyter server URL (default: ${URL_ENV}, else a running server)",
        )
        p.add_argument("--json", action="store_true", help="print the answer as JSON")
        p.set_defaults(handler={"plans": cmd_plans, "approve": cmd_approve}.get(name, cmd_reject))


def _remote(args: argparse.Namespace) -> RestClient:
    """The Jupyter server to act on, or :class:`ServerUnreachable` saying how to name one."""
    if args.server:
        return RestClient(args.server, os.environ.get(TOKEN_ENV, ""))
    found = discover_server(os.environ)
    if found is None:
        raise ServerUnreachable(
            "no running Jupyter server with the sandbox extension was found; set "
            f"{URL_ENV} and {TOKEN_ENV} (or pass --server). Plans made by an agent without a "
            "Jupyter server live only in that agent's process and cannot be approved from here"
        )
    return RestClient(found.url, found.token)


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _print_pending(plan: ExecutionPlan) -> None:
    print_plan(plan)
    origin = "an agent" if plan.source == AGENT_SOURCE else plan.source
    print(f"  requested by {origin}")
    print_plan_code(plan, sys.stdout)


def cmd_plans(args: argparse.Namespace) -> int:
    """``jupyter sandbox plans``."""
    plans = run_sync(_remote(args).pending())
    if args.json:
        _print_json([plan.to_dict() for plan in plans])
    elif not plans:
        print("no plans are waiting for approval")
    for plan in [] if args.json else plans:
        _print_pending(plan)
        print()
    return 0


def _find(remote: RestClient, plan_id: str) -> ExecutionPlan | None:
    for plan in run_sync(remote.pending()):
        if plan.plan_id == plan_id:
            return plan
    return None


def cmd_approve(args: argparse.Namespace) -> int:
    """``jupyter sandbox approve PLAN_ID``: show the plan, approve it."""
    remote = _remote(args)
    plan = _find(remote, args.plan_id)
    answer = run_sync(remote.approve(args.plan_id, for_planner=True))
    if args.json:
        _print_json(answer)
        return 0
    if plan is not None:
        _print_pending(plan)
    by_agent = plan is not None and plan.source == AGENT_SOURCE
    waiting = " The agent that planned it can now run it." if by_agent else ""
    print(f"Approved {args.plan_id} (valid for {answer['expires_in']} s).{waiting}")
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    """``jupyter sandbox reject PLAN_ID``."""
    answer = run_sync(_remote(args).reject(args.plan_id))
    if args.json:
        _print_json({"plan_id": args.plan_id, "rejected": True} if answer is None else answer)
    else:
        print(f"Rejected {args.plan_id}; it will not run.")
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """``jupyter sandbox mcp``: serve the tools on stdio until the client disconnects."""
    try:
        from ..agents.mcp_server import serve_stdio
    except ImportError as exc:
        print(
            f"error: the MCP server needs the mcp package ({exc}); "
            "install it with: pip install 'gitpilot-jupyter[agents]'",
            file=sys.stderr,
        )
        return 1
    from ..agents.tools import AgentSandbox

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
