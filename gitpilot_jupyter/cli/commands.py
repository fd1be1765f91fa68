"""Core commands: ``status``, ``config``, ``plan``, ``run``.

They go through the client layer like every other face: a
:class:`~gitpilot_jupyter.client.local.LocalClient` drives the core in this
process (the CLI plans, approves and runs here; ``jupyter sandbox plans`` is the
command that reaches a Jupyter server). ``plan`` and ``run`` with ``--session NAME``
or ``--server URL`` go through the running server's REST API instead (a session lives
in the server); Ctrl-C then stops the run there, and a session's cell is interrupted
(the session keeps its state).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from ..client.base import SandboxClient
from ..client.local import LocalClient
from ..client.server import URL_ENV
from ..sandbox import rich
from ..sandbox.errors import InvalidRequest
from ..sandbox.inputs import absolute_paths
from ..sandbox.languages import language_for_path
from ..sandbox.local.off import off_confirmation
from ..sandbox.local.pool import PoolConfig
from ..sandbox.plans import ExecutionPlan
from ..sandbox.report import stopped_message
from ..sandbox.request import RunOptions
from ..sandbox.results import RunResult, new_run_id
from ..sandbox.rich.saving import default_output_dir
from ..sandbox.settings import FIELD_NAMES, parse_assignments
from ..sandbox.sync import run_sync
from .agents import remote_server
from .outputs import TerminalDisplays
from .render import print_plan, print_plan_code, print_result_footer, print_status

#: Exit status of a snippet that timed out, as ``timeout(1)`` reports it.
EXIT_TIMEOUT = 124
#: A run stopped by Ctrl-C exits as a shell's interrupted command does (128 + SIGINT).
EXIT_STOPPED = 130


#: The name the CLI's calls are recorded under in audit events.
CLI_USER = "cli"


def make_client(*, pool: str = "off") -> LocalClient:
    """The client the CLI drives: the core in this process, on the current folder.

    Settings and env apply as for every face. ``batch`` and ``debug`` work on the
    core itself (its batch runner, its diagnostics): they take ``.service``.
    ``pool`` is the warm pool's mode unless ``GITPILOT_SANDBOX_POOL`` sets one: off
    for a one-shot command (a slot started after its only run would be wasted),
    ``auto`` for a batch of many runs.
    """
    return LocalClient(
        session_id=f"cli-{uuid.uuid4().hex[:12]}",
        user=CLI_USER,
        pool=PoolConfig.from_env(default_mode=pool),
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``status``, ``config``, ``plan`` and ``run``."""
    p = subparsers.add_parser("status", help="show the live backend, settings and health")
    p.add_argument("--json", action="store_true", help="print the status as JSON")
    p.add_argument("--verbose", action="store_true", help="name each isolation layer")
    p.set_defaults(handler=cmd_status)

    p = subparsers.add_parser(
        "config",
        help="show the settings, or change them with --set KEY=VALUE",
        description=f"Settings keys: {', '.join(FIELD_NAMES)}. The token is write-only; "
        "`--set matrixlab_token=` clears it.",
    )
    p.add_argument(
        "--set",
        dest="changes",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set one setting (repeatable); nothing is written if any value is invalid",
    )
    p.add_argument("--json", action="store_true", help="print the settings as JSON")
    p.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="confirm without asking (switching to pass-through, no sandbox, asks otherwise)",
    )
    p.set_defaults(handler=cmd_config)

    for name, helptext in (
        ("plan", "show the plan for a snippet without running it"),
        ("run", "plan, approve and run a snippet; exit with its exit code"),
    ):
        p = subparsers.add_parser(name, help=helptext)
        p.add_argument(
            "language",
            nargs="?",
            help="python, javascript or bash (or an alias); "
            "guessed from FILE's extension when omitted",
        )
        p.add_argument("file", nargs="?", help="a file to run instead of -c CODE")
        p.add_argument("-c", "--code", help="the code to run")
        p.add_argument("--timeout", type=int, help="seconds, 1..600 (default: the settings')")
        p.add_argument("--backend", help="subprocess, matrixlab or off (default: the settings')")
        net = p.add_mutually_exclusive_group()
        net.add_argument(
            "--network",
            dest="network",
            action="store_true",
            default=None,
            help="allow network access for this run",
        )
        net.add_argument(
            "--no-network",
            dest="network",
            action="store_false",
            help="deny network access for this run",
        )
        p.add_argument(
            "--stdin",
            dest="stdin_file",
            metavar="FILE",
            help="feed this file to the snippet's stdin ('-' for this stdin)",
        )
        p.add_argument(
            "--env",
            action="append",
            metavar="NAME",
            help="pass this variable of your environment to the snippet (repeatable); "
            "nothing else but PATH, locale and TZ reaches it",
        )
        p.add_argument(
            "--input",
            dest="inputs",
            action="append",
            metavar="PATH",
            help="hand this file or folder to the snippet (repeatable): it appears, read-only "
            "where the engine can make it so, as ./NAME in the snippet's folder",
        )
        p.add_argument(
            "--session",
            metavar="NAME",
            help="a cell of session NAME on the running Jupyter server (started by its first "
            "cell): its variables, imports and files stay for the next one",
        )
        p.add_argument(
            "--server",
            metavar="URL",
            help=f"plan and run on this Jupyter server, not in this process (with --session "
            f"by default: ${URL_ENV}, else a running server)",
        )
        p.add_argument("--json", action="store_true", help="print the plan / result as JSON")
        if name == "run":
            p.add_argument(
                "-y",
                "--yes",
                action="store_true",
                help="approve without asking (needed when stdin is not a terminal)",
            )
            p.add_argument(
                "--output-dir",
                metavar="DIR",
                help="save the run's images and out/ files here (default: sandbox-out/RUN_ID/ "
                "in this folder)",
            )
            p.add_argument(
                "--force", action="store_true", help="replace files already in --output-dir"
            )
            p.set_defaults(handler=cmd_run)
        else:
            p.set_defaults(handler=cmd_plan)


def _print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def cmd_status(args: argparse.Namespace) -> int:
    """``jupyter sandbox status``."""
    status = run_sync(make_client().status())
    if args.json:
        _print_json(status)
    else:
        print_status(status, verbose=args.verbose)
    return 0 if status["ok"] else 1


def cmd_config(args: argparse.Namespace) -> int:
    """``jupyter sandbox config [--set KEY=VALUE ...]``."""
    client = make_client()
    if args.changes:
        changes = parse_assignments(args.changes, what="--set")
        status = run_sync(client.status())
        question = off_confirmation(
            changes, status["settings"]["backend"], status["allowed_backends"]
        )
        if question is not None and not _ask(question, args.yes, "switch"):
            print(NOT_SAVED, file=sys.stderr)
            return 2
        # Asked and said yes (or --yes): only then may the switch to off be saved.
        run_sync(client.configure(changes, confirm=question is not None))
    config = run_sync(client.config())
    if args.json:
        _print_json(config)
    else:
        for key, value in config.items():
            print(f"{key:18} {json.dumps(value)}")
        print(f"{'file':18} {run_sync(client.settings_file())}")
    return 0


def _snippet(args: argparse.Namespace) -> RunOptions:
    """Language, code and file from ``LANGUAGE (-c CODE | FILE)``."""
    language, file = args.language, args.file
    if args.code is None and file is None and language and Path(language).suffix:
        language, file = None, language  # `run demo.py`: the only positional is the file
    if (args.code is None) == (file is None):
        raise InvalidRequest("give exactly one of -c CODE or FILE")
    if file is not None:
        path = Path(file)
        try:
            code = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidRequest(f"cannot read {file}: {exc.strerror or exc}") from None
        language = language or language_for_path(file)
    else:
        code = args.code
        language = language or "python"
    stdin: str | None = None
    if args.stdin_file == "-":
        stdin = sys.stdin.read()
    elif args.stdin_file:
        stdin = Path(args.stdin_file).read_text(encoding="utf-8")
    return RunOptions(
        language=language,
        code=code,
        filename=file,  # read here: only its name goes along, the run is named after it
        stdin=stdin,
        timeout_sec=args.timeout,
        backend=args.backend,
        allow_network=args.network,
        env=args.env or (),
        inputs=absolute_paths(args.inputs),
        session=args.session,
    )


def _client_for(args: argparse.Namespace) -> SandboxClient:
    """The core in this process, or with ``--session`` / ``--server`` the running Jupyter
    server (a session lives in the server: this process would take it along when it ends)."""
    if args.session is not None or args.server is not None:
        return remote_server(args)
    return make_client()


def cmd_plan(args: argparse.Namespace) -> int:
    """``jupyter sandbox plan``: the plan only."""
    plan = run_sync(_client_for(args).plan(_snippet(args)))
    if args.json:
        _print_json(plan.to_dict())
    else:
        print_plan(plan)
        print_plan_code(plan)
    return 2 if plan.blocked else 0


#: What the CLI says when a run was declined (answered no, or no terminal to ask on).
NOT_RUN = "not run: the plan was not approved, nothing ran"
#: What the CLI says when a settings change was declined.
NOT_SAVED = "not saved: the settings are unchanged"


def _ask(question: str, yes: bool, what: str) -> bool:
    """True when ``--yes`` was given or the user answers yes on the terminal."""
    if yes:
        return True
    if not sys.stdin.isatty():
        print(
            f"error: {question}\nNo terminal to ask on: re-run with --yes to {what}.",
            file=sys.stderr,
        )
        return False
    print(question, file=sys.stderr)
    answer = input("Continue? [y/N] ").strip().lower()
    return answer in ("y", "yes")


def _confirm(plan: ExecutionPlan, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        print(
            "error: this run needs an approval; no terminal to ask on. "
            "Re-run with --yes to approve it.",
            file=sys.stderr,
        )
        return False
    print_plan_code(plan, sys.stderr)
    answer = input("Approve and run? [y/N] ").strip().lower()
    return answer in ("y", "yes")


def exit_status(result: RunResult) -> int:
    """The CLI's exit status for a result: the snippet's, 124 on timeout, 130 when stopped."""
    if result.cancelled:
        return EXIT_STOPPED
    if result.timed_out:
        return EXIT_TIMEOUT
    if result.exit_code < 0:
        return 1
    return min(result.exit_code, 255)


def cmd_run(args: argparse.Namespace) -> int:
    """``jupyter sandbox run``: plan, confirm, approve, run."""
    client = _client_for(args)
    snippet = _snippet(args)
    plan = run_sync(client.plan(snippet))
    if not args.json:
        print_plan(plan, stream=sys.stderr)
    if plan.blocked:
        print(f"error: refused by policy: {plan.blocked_reason}", file=sys.stderr)
        return 2
    if plan.requires_approval and not _confirm(plan, args.yes):
        print(NOT_RUN, file=sys.stderr)
        return 2

    pipe_closed = False
    run_id = new_run_id()
    displays = TerminalDisplays(args.output_dir or default_output_dir(run_id), force=args.force)

    async def stop() -> None:
        await client.cancel(run_id)

    async def go() -> RunResult:
        approval = await client.approve(plan.plan_id)
        main_task = asyncio.current_task()

        async def echo(stream: str, text: str) -> None:
            nonlocal pipe_closed
            if stream == rich.DISPLAY_STREAM:  # a figure is saved, its path printed
                stream, text = "stdout", displays.text(rich.parse_display(text))
            out = sys.stdout if stream == "stdout" else sys.stderr
            if pipe_closed:
                return
            try:
                out.write(text)
                out.flush()
            except BrokenPipeError:
                # The reader is gone (`| head`): stop the run (its process tree is
                # killed and its folder removed) and end as a pipeline would.
                pipe_closed = True
                if main_task is not None:
                    main_task.cancel()

        return await client.run(
            str(approval["approval_token"]),
            on_output=None if args.json else echo,
            run_id=run_id,
        )

    async def go_and_save() -> RunResult:
        result = await go()
        if not args.json:  # (the envelope lists them; --json saves nothing)
            files_saved.extend(await displays.save_files(result, client.run_file))
        return result

    files_saved: list[str] = []
    # Ctrl-C stops the run (its process tree is killed) and still prints its envelope.
    try:
        result = run_sync(go_and_save(), on_interrupt=stop)
    except KeyboardInterrupt:
        print(f"\n{stopped_message(None)}", file=sys.stderr)
        return EXIT_STOPPED
    except asyncio.CancelledError:
        if pipe_closed:
            raise BrokenPipeError from None
        raise
    if args.json:
        _print_json(result.to_dict())
    elif result.cancelled:
        print(f"\n{stopped_message(result.duration_ms / 1000)}", file=sys.stderr)
        for note in result.notes if args.session is not None else ():
            print(note, file=sys.stderr)  # (the session keeps its state, or was lost)
    else:
        print_result_footer(result, stream=sys.stderr)
    for line in files_saved:
        print(line, file=sys.stderr)
    for refused in displays.refused:
        print(f"error: {refused}", file=sys.stderr)
    status = exit_status(result)
    # An image that could not be saved fails the command, as a copy that fails would.
    return 1 if displays.refused and status == 0 else status
