"""Commands on agents' plans: ``plans``, ``approve`` and ``reject``.

``jupyter sandbox mcp`` (the MCP server for agents) belongs to the agents face
(``agents/command.py``); the composition root (:mod:`gitpilot_jupyter.wiring`)
adds it to this parser, so the CLI never imports the agents.

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

from ..client.rest import RestClient
from ..client.server import TOKEN_ENV, URL_ENV, discover_server
from ..sandbox.errors import ServerUnreachable
from ..sandbox.plans import AGENT_SOURCE, ExecutionPlan
from ..sandbox.sync import run_sync
from .render import print_plan, print_plan_code


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``plans``, ``approve`` and ``reject``."""
    for name, helptext in (
        ("plans", "list the plans waiting for approval on the Jupyter server"),
        ("approve", "approve a pending plan (e.g. an agent's) on the Jupyter server"),
        ("reject", "reject a pending plan on the Jupyter server; it never runs"),
    ):
        p = subparsers.add_parser(name, help=helptext)
        if name != "plans":
            p.add_argument("plan_id", metavar="PLAN_ID")
        add_server_options(p)
        p.set_defaults(handler={"plans": cmd_plans, "approve": cmd_approve}.get(name, cmd_reject))


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """``--server URL`` and ``--json``: what every command on a running server takes."""
    parser.add_argument(
        "--server", help=f"the Jupyter server URL (default: ${URL_ENV}, else a running server)"
    )
    parser.add_argument("--json", action="store_true", help="print the answer as JSON")


def remote_server(args: argparse.Namespace) -> RestClient:
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


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _print_pending(plan: ExecutionPlan) -> None:
    print_plan(plan)
    origin = "an agent" if plan.source == AGENT_SOURCE else plan.source
    print(f"  requested by {origin}")
    print_plan_code(plan, sys.stdout)


def cmd_plans(args: argparse.Namespace) -> int:
    """``jupyter sandbox plans``."""
    plans = run_sync(remote_server(args).pending())
    if args.json:
        print_json([plan.to_dict() for plan in plans])
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
    remote = remote_server(args)
    plan = _find(remote, args.plan_id)
    answer = run_sync(remote.approve(args.plan_id, for_planner=True))
    if args.json:
        print_json(answer)
        return 0
    if plan is not None:
        _print_pending(plan)
    by_agent = plan is not None and plan.source == AGENT_SOURCE
    waiting = " The agent that planned it can now run it." if by_agent else ""
    print(f"Approved {args.plan_id} (valid for {answer['expires_in']} s).{waiting}")
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    """``jupyter sandbox reject PLAN_ID``."""
    answer = run_sync(remote_server(args).reject(args.plan_id))
    if args.json:
        print_json({"plan_id": args.plan_id, "rejected": True} if answer is None else answer)
    else:
        print(f"Rejected {args.plan_id}; it will not run.")
    return 0
