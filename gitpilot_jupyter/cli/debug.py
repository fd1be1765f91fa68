"""``jupyter sandbox debug``: walk the sandbox path stage by stage (read-only)."""

from __future__ import annotations

import argparse
import json
import sys

from ..sandbox.diagnostics import failed, launch_text, probe_service, render_text, run_diagnostics
from ..sandbox.sync import run_sync
from .commands import make_client


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``debug``."""
    p = subparsers.add_parser(
        "debug",
        help="check every stage of the sandbox path and say how to fix what fails",
        description="Settings, local hello-world, stdin, timeout kill, approval gate and the "
        "OS isolation layers; with --matrixlab also the Runner. Read-only: nothing is "
        "saved. Exits 1 when any stage fails.",
    )
    p.add_argument(
        "--matrixlab",
        action="store_true",
        help="also check the MatrixLab Runner (health, Docker, capabilities, a snippet)",
    )
    p.add_argument("--json", action="store_true", help="print the stages as JSON")
    p.add_argument(
        "--show-launch",
        action="store_true",
        help="print the launch plan (steps, fds, mounts or Landlock rules, seccomp, limits, "
        "uid, network) the engine in force would use for a python run now; runs nothing",
    )
    p.add_argument(
        "--network",
        action="store_true",
        help="with --show-launch: the plan of a network-on run",
    )
    p.set_defaults(handler=cmd_debug)


def cmd_debug(args: argparse.Namespace) -> int:
    """``jupyter sandbox debug [--matrixlab] [--json] [--show-launch [--network]]``."""
    if args.show_launch:
        service = probe_service(make_client().service)
        sys.stdout.write(launch_text(service, allow_network=args.network))
        return 0
    stages = run_sync(run_diagnostics(make_client().service, matrixlab=args.matrixlab))
    if args.json:
        doc = {"ok": not failed(stages), "stages": [s.to_dict() for s in stages]}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(stages))
    return 1 if failed(stages) else 0
