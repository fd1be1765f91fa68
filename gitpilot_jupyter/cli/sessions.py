"""``jupyter sandbox session list | stop NAME | restart NAME``: a Jupyter server's sessions.

Sessions live in the server that started them (a command's own process would take
its sessions with it when it ends), so these act on the running server that
``plans`` and ``approve`` find, as the identity of its token.
"""

from __future__ import annotations

import argparse

from ..sandbox.sync import run_sync
from .agents import add_server_options, print_json, remote_server


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``session list | stop NAME | restart NAME``."""
    parser = subparsers.add_parser(
        "session", help="list, stop or restart the sessions on the Jupyter server"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list your sessions (kernels kept between cells)")
    stop = actions.add_parser("stop", help="stop a session: nothing of it is left")
    restart = actions.add_parser("restart", help="start a session afresh: its state is gone")
    for action in (stop, restart):
        action.add_argument("name", metavar="NAME")
    for action in (listing, stop, restart):
        add_server_options(action)
        action.set_defaults(handler=cmd_session)


def cmd_session(args: argparse.Namespace) -> int:
    """``jupyter sandbox session ACTION``."""
    remote = remote_server(args)
    if args.action == "list":
        sessions = run_sync(remote.sessions())
        if args.json:
            print_json(sessions)
        elif not sessions:
            print("no session is open")
        for info in [] if args.json else sessions:
            network = "network on" if info["network"] else "network off"
            print(f"{info['name']:24} {info['state']:5} {info['cells']:4} cells  {network}")
    elif args.action == "stop":
        run_sync(remote.stop_session(args.name))
        if args.json:
            print_json({"name": args.name, "stopped": True})
        else:
            print(f"Stopped session {args.name}: nothing of it is left.")
    else:
        info = run_sync(remote.restart_session(args.name))
        if args.json:
            print_json(info)
        else:
            print(f"Restarted session {args.name}: its variables and files are gone.")
    return 0
