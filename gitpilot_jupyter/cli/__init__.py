"""``jupyter sandbox``: the command-line face of the sandbox.

Each command group lives in its own module with a ``register(subparsers)``
function; this module builds the parser and maps core errors to exit statuses
in one place. Groups of other faces (the agents' ``mcp``) are given to
:func:`build_parser` / :func:`main` by the composition root
(:mod:`gitpilot_jupyter.wiring`, the ``jupyter-sandbox`` entry point): the CLI
never imports another face.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

from .._version import __version__
from ..sandbox.errors import SandboxError
from . import agents, batch, commands, debug, matrixlab, sessions

#: Exit status for a refused or invalid request (as argparse uses for usage errors).
EXIT_USAGE = 2
#: Exit status when stdout's reader went away, as a shell reports a SIGPIPE death.
EXIT_SIGPIPE = 128 + 13

Handler = Callable[[argparse.Namespace], int]


class CommandGroup(Protocol):
    """A module (or object) adding subcommands; each sets ``handler`` to a :data:`Handler`."""

    def register(self, subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Add this group's subcommands to ``subparsers``."""


#: The CLI's own groups, in the order ``--help`` lists them; other faces' groups
#: (given to :func:`build_parser`) come after ``batch``, before the plans commands.
COMMANDS_FIRST: tuple[CommandGroup, ...] = (commands, batch)
COMMANDS_LAST: tuple[CommandGroup, ...] = (agents, sessions, matrixlab, debug)


def build_parser(extra: Sequence[CommandGroup] = ()) -> argparse.ArgumentParser:
    """The ``jupyter sandbox`` parser, with ``extra`` groups from other faces."""
    parser = argparse.ArgumentParser(
        prog="jupyter sandbox",
        description=(
            "Plan, approve and run untrusted snippets in the gitpilot-jupyter sandbox, "
            "and manage its settings."
        ),
        epilog=(
            "Exit status: the snippet's own exit code for `run`; 124 when it timed out "
            "(as timeout(1)); 2 for a refused or invalid request; 1 for any other failure."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for group in (*COMMANDS_FIRST, *extra, *COMMANDS_LAST):
        group.register(subparsers)
    return parser


def json_error(exc: SandboxError) -> dict[str, object]:
    """The JSON object ``--json`` prints for a refused or failed command."""
    return {"error": {"code": exc.code, "message": exc.message, "status": exc.status}}


def stdout_gone() -> int:
    """The reader of stdout went away (``| head -c 1``): end quietly, as other tools do.

    stdout is pointed at /dev/null so the interpreter's last flush cannot fail
    again, and the status is the one a shell reports for a SIGPIPE death (128 + 13).
    """
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return EXIT_SIGPIPE


def main(argv: Sequence[str] | None = None, extra: Sequence[CommandGroup] = ()) -> int:
    """Run the CLI (with ``extra`` groups from other faces); return the exit status."""
    parser = build_parser(extra)
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        status = handler(args)
        sys.stdout.flush()  # here, where a closed pipe can still be handled
        return status
    except BrokenPipeError:
        return stdout_gone()
    except SandboxError as exc:
        try:
            if getattr(args, "json", False):
                json.dump(json_error(exc), sys.stdout)
                sys.stdout.write("\n")
                sys.stdout.flush()
            else:
                print(f"error: {exc.message}", file=sys.stderr)
        except BrokenPipeError:
            return stdout_gone()
        # A refusal or bad input is a usage error; an unavailable service (5xx) is a failure.
        return EXIT_USAGE if exc.status < 500 else 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
