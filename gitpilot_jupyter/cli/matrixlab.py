"""``jupyter sandbox matrixlab status|install|start|stop|test``: the Runner from a terminal."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..client.base import SandboxClient
from ..sandbox.sync import run_sync
from .commands import make_client


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``matrixlab`` and its subcommands."""
    parser = subparsers.add_parser(
        "matrixlab",
        help="test, install, start and stop the MatrixLab Runner",
        description="The MatrixLab Runner: Test connection, and its Docker lifecycle. "
        "install / start / stop need GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1.",
    )
    actions = parser.add_subparsers(dest="matrixlab_command", metavar="ACTION")
    actions.required = True
    for name, helptext in (
        ("status", "is the runner image installed, is the Runner running (read-only)"),
        ("install", "pull the runner and sandbox images that are missing"),
        ("start", "start the Runner container (idempotent) and wait until it answers"),
        ("stop", "stop the Runner container"),
        ("test", "Test connection: reachability, version, Docker, token, endpoints"),
    ):
        p = actions.add_parser(name, help=helptext)
        p.add_argument("--json", action="store_true", help="print the answer as JSON")
        if name == "test":
            p.add_argument("--url", help="test this URL instead of the saved matrixlab_url")
            p.add_argument(
                "--token",
                help="test this token instead of the saved one ('-' reads it from stdin, "
                "which keeps it out of the process list)",
            )
            p.set_defaults(handler=cmd_test)
        else:
            p.set_defaults(handler=cmd_lifecycle, action=name)


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def _yes(value: object) -> str:
    if value is None:
        return "unknown"
    return "yes" if value else "NO"


def cmd_test(args: argparse.Namespace) -> int:
    """``jupyter sandbox matrixlab test [--url U] [--token T]``: exit 0 when all is well."""
    token = sys.stdin.readline().strip() if args.token == "-" else args.token
    report = run_sync(make_client().test_matrixlab(url=args.url, token=token))
    if args.json:
        _print_json(report)
        return 0 if report["ok"] else 1
    w = sys.stdout.write
    w(f"MatrixLab Runner at {report['url']}: {'OK' if report['ok'] else 'FAILED'}\n")
    latency = f" ({report['latency_ms']} ms)" if report["latency_ms"] is not None else ""
    w(f"  reachable   {_yes(report['reachable'])}{latency}\n")
    if report["reachable"]:
        w(f"  version     {report['version']} ({report['protocol'] or 'protocol unknown'})\n")
        w(f"  docker      {_yes(report['docker_ok'])}\n")
        w(f"  token       {report['token']}\n")
        w(f"  /code/run   {_yes(report['code_run'])}\n")
        w(f"  /run        {_yes(report['workspace_run'])}\n")
    if report["error"]:
        w(f"  error       {report['error']}\n")
    for hint in report["hints"]:
        w(f"  hint        {hint}\n")
    return 0 if report["ok"] else 1


def _print_lifecycle(answer: dict[str, Any]) -> None:
    w = sys.stdout.write
    for step in answer.get("steps", []):
        w(f"$ {step['cmd']}\n")
        for stream in ("stdout", "stderr"):
            for line in str(step[stream]).splitlines():
                w(f"    {line}\n")
        w(f"  exit {step['exit_code']} · {step['duration_ms']} ms\n")
    if "ok" in answer:
        w(f"{answer['action']}: {'OK' if answer['ok'] else 'FAILED'}\n")
        if answer["error"]:
            w(f"error: {answer['error']}\n")
    if answer.get("warning"):
        w(f"warning: {answer['warning']}\n")
    w(f"docker available   {_yes(answer['docker_available'])}\n")
    if answer["docker_error"]:
        w(f"docker error       {answer['docker_error']}\n")
    w(f"lifecycle enabled  {_yes(answer['lifecycle_enabled'])}\n")
    for image in answer["images"]:
        present = {True: "present", False: "missing"}.get(image["present"], "?")
        w(f"{image['role'] + ' image':18} {image['name']}  ({present})\n")
    container = answer["container"]
    state = f"{container['state']} ({container['id']})" if container else "not created"
    w(f"container          {answer['container_name']}: {state}\n")
    for reason in (container or {}).get("stale") or []:
        w(f"                   start replaces it: {reason}\n")
    w(f"running            {_yes(answer['running'])} at {answer['url']}\n")
    if not answer["running"] and answer.get("health_error"):
        w(f"                   {answer['health_error']}\n")


async def _lifecycle(client: SandboxClient, action: str, echo: bool) -> dict[str, Any]:
    shown: set[tuple[str, str]] = set()

    async def progress(event: dict[str, Any]) -> None:
        line = (str(event.get("image")), f"{event.get('id', '')} {event.get('status', '')}")
        if echo and line not in shown:  # one line per layer state, not per byte
            shown.add(line)
            sys.stderr.write(f"{line[0]}: {line[1].strip()}\n")

    return await client.lifecycle(action, progress)


def cmd_lifecycle(args: argparse.Namespace) -> int:
    """``jupyter sandbox matrixlab status|install|start|stop``."""
    answer = run_sync(_lifecycle(make_client(), args.action, not args.json))
    if args.json:
        _print_json(answer)
    else:
        _print_lifecycle(answer)
    return 0 if answer.get("ok", True) else 1
