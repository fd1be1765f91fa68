"""``%%sandbox`` and ``%sandbox``: the sandbox in a notebook cell.

Executing a ``%%sandbox`` cell is the user's approval for a plan without a
high-severity warning; a plan with one shows an Approve / Reject card and runs
on the click (or at once with ``--yes``). A blocked plan never runs. Core errors
become a one-line ``UsageError`` here, an outage a one-line ``SandboxUnavailable``
(:func:`usage_errors`, the one place this face maps them).

``%sandbox plans`` shows a card for each plan waiting on the Jupyter server
(typically an agent's, in ``ask`` mode); its Approve only approves: the agent
claims the token and runs the plan itself. ``%sandbox approve|reject PLAN_ID``
are the line forms.

``%%sandbox --session NAME`` runs the cell in session NAME: one kernel in the sandbox
that keeps variables, imports and files between cells (each cell still planned and
approved; the first starts it). ``%sandbox session list | restart NAME | stop NAME``
drive this caller's sessions.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, cast

from IPython.core import magic_arguments as ma
from IPython.core.error import StdinNotImplementedError, UsageError
from IPython.core.magic import Magics, magics_class
from IPython.core.magic import cell_magic as _cell_magic
from IPython.core.magic import line_magic as _line_magic
from IPython.display import display as _display
from traitlets import Bool, Unicode, observe

from ..client.base import SandboxClient
from ..client.local import LocalClient
from ..client.resolve import make_client
from ..sandbox.errors import PlanBlocked, SandboxError
from ..sandbox.inputs import absolute_paths
from ..sandbox.local.off import off_confirmation
from ..sandbox.plans import ExecutionPlan
from ..sandbox.report import launcher, status_text, stopped_message
from ..sandbox.request import RunOptions
from ..sandbox.results import RunResult, new_run_id
from ..sandbox.service import SandboxService
from ..sandbox.settings import parse_assignments
from ..sandbox.sync import run_sync
from .display import (
    CellEcho,
    SandboxBlocked,
    SandboxRunError,
    SandboxStopped,
    SandboxUnavailable,
    footer,
    is_outage,
)
from .outfiles import save_run_files
from .views import NotebookViews, NoViews, focus

F = TypeVar("F", bound=Callable[..., Any])

#: Why ``%sandbox plans`` may miss an agent's plan: it waits on a server this kernel does not use.
NO_SERVER_NOTE = (
    "No Jupyter server is reachable from this kernel (in-process path): only plans agents made "
    "in this kernel are listed. Agents' plans wait on a Jupyter server; to approve them here, "
    "%config SandboxMagics.server = 'http://HOST:PORT/' (and SandboxMagics.server_token)."
)

# IPython's decorators are untyped (or typed too narrowly): typed aliases keep mypy strict here.
argument: Callable[..., Callable[[F], F]] = ma.argument
magic_arguments: Callable[..., Callable[[F], F]] = ma.magic_arguments
parse_argstring: Callable[[Any, str], Any] = ma.parse_argstring
cell_magic = cast(Callable[[str], Callable[[F], F]], _cell_magic)
line_magic = cast(Callable[[str], Callable[[F], F]], _line_magic)
display: Callable[..., None] = _display

LINE_USAGE = (
    "%sandbox status [--verbose] | settings | config [--yes] [KEY=VALUE ...] | debug [--matrixlab]"
    " | last | plans | approve PLAN_ID | reject PLAN_ID | batch SOURCE [options]"
    " | session list | session restart NAME | session stop NAME"
)
SESSION_USAGE = "usage: %sandbox session list | restart NAME | stop NAME"


@contextlib.contextmanager
def usage_errors() -> Iterator[None]:
    """Turn a core :class:`SandboxError` into a one-line ``UsageError`` (an outage into
    :class:`SandboxUnavailable`: not the user's mistake)."""
    try:
        yield
    except SandboxError as exc:
        if is_outage(exc):
            raise SandboxUnavailable(exc) from None
        raise UsageError(f"sandbox: {exc.message} [{exc.code}]") from None


@magics_class
class SandboxMagics(Magics):
    """Run cells in the gitpilot sandbox: ``%%sandbox`` and ``%sandbox``."""

    server = Unicode(
        "auto",
        help="Where snippets go: 'auto' (the REST API of the Jupyter server that launched "
        "this kernel when it has the sandbox extension, else in-process), 'local' (always "
        "in-process) or the http(s) URL of a Jupyter server.",
    ).tag(config=True)
    server_token = Unicode(
        "",
        help="Token for a Jupyter server given by URL in `server` (default: $JUPYTER_TOKEN).",
    ).tag(config=True)
    default_language = Unicode("python", help="Language of a %%sandbox cell that names none.").tag(
        config=True
    )
    raise_error = Bool(
        True,
        help="Raise a short error when a snippet exits non-zero or times out "
        "(per cell: --no-raise-error).",
    ).tag(config=True)
    show_footer = Bool(
        True, help="Print the one-line footer (backend, exit code, duration, badges) after a run."
    ).tag(config=True)

    def __init__(
        self, shell: Any = None, *, views: NotebookViews | None = None, **kwargs: Any
    ) -> None:
        super().__init__(shell=shell, **kwargs)
        #: The cards, panel and progress bars shown (injected by ``%load_ext gitpilot_jupyter``).
        self.views: NotebookViews = views or NoViews()
        self._client: SandboxClient | None = None
        self.last: dict[str, Any] | None = None
        #: The approval card shown most recently (``None`` until a plan needs one).
        self.card: Any = None
        #: The cards ``%sandbox plans`` showed last, one per pending plan.
        self.plan_cards: list[Any] = []
        # %config lists and configures only the shell's registered configurables.
        if shell is not None and self not in shell.configurables:
            shell.configurables.append(self)

    @observe("server", "server_token")
    def _forget_client(self, _change: Any) -> None:
        self._client = None

    @property
    def client(self) -> SandboxClient:
        """The client for the ``server`` setting, found on first use."""
        if self._client is None:
            with usage_errors():
                self._client = make_client(self.server, self.server_token)
        return self._client

    @property
    def user_ns(self) -> dict[str, Any]:
        """The notebook's namespace (``--stdin`` reads it, ``--out`` writes it)."""
        assert self.shell is not None, "SandboxMagics needs an IPython shell"
        ns: dict[str, Any] = self.shell.user_ns
        return ns

    def _store(self, result: RunResult, out: str | None) -> None:
        self.last = result.to_dict()
        if out:
            self.user_ns[out] = self.last

    def _stdin(self, name: str | None) -> str | None:
        if name is None:
            return None
        if name not in self.user_ns:
            raise UsageError(f"sandbox: --stdin {name}: no variable named {name!r}")
        value = self.user_ns[name]
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        if not isinstance(value, str):
            raise UsageError(
                f"sandbox: --stdin {name}: must be str or bytes, not {type(value).__name__}"
            )
        return value

    @magic_arguments(name="%%sandbox")
    @argument("language", nargs="?", default=None, help="python (default), javascript or bash")
    @argument("--timeout", type=int, metavar="N", help="seconds, 1..600")
    @argument(
        "--network", dest="network", action="store_const", const=True, default=None,
        help="allow network access",
    )  # fmt: skip
    @argument(
        "--no-network", dest="network", action="store_const", const=False, help="deny network"
    )
    @argument("--backend", help="subprocess, matrixlab or off")
    @argument(
        "--env",
        action="append",
        metavar="NAME",
        help="pass this server environment variable to the snippet (repeatable)",
    )
    @argument(
        "--input",
        dest="inputs",
        action="append",
        metavar="PATH",
        help="hand this file or folder (beside the notebook) to the snippet as ./NAME, "
        "read-only where the engine can make it so (repeatable)",
    )
    @argument(
        "--output-dir",
        metavar="DIR",
        help="save the run's out/ files here (default: sandbox-out/RUN_ID/ beside the notebook)",
    )
    @argument("--force", action="store_true", help="replace files already in --output-dir")
    @argument(
        "--session",
        metavar="NAME",
        help="run in session NAME: a kernel in the sandbox that keeps its state between "
        "cells (python; started by its first cell)",
    )
    @argument("--stdin", metavar="VAR", help="feed this str variable as stdin")
    @argument("--out", metavar="VAR", help="store the result envelope in VAR")
    @argument("--yes", action="store_true", help="approve plans with high warnings without a card")
    @argument(
        "--no-raise-error",
        dest="raise_error",
        action="store_false",
        default=None,
        help="do not raise when the snippet exits non-zero",
    )
    @cell_magic("sandbox")
    def sandbox_cell(self, line: str, cell: str) -> Any:
        """Plan, approve and run the cell in the sandbox; stream its output."""
        args = parse_argstring(self.sandbox_cell, line)
        if {"--network", "--no-network"} <= set(line.split()):
            raise UsageError("sandbox: give --network or --no-network, not both")
        stdin = self._stdin(args.stdin)
        client = self.client
        language = args.language or self.default_language
        echo = CellEcho(language)  # tracebacks numbered like the cell
        # The run has its own id so an interrupt (the kernel's stop button) can stop it
        # where it runs, on the server too, and the cell still gets its envelope.
        run_id = new_run_id()
        session = args.session

        def interrupt() -> Awaitable[None]:
            # A session's cell is interrupted in its kernel, which keeps its state.
            if session is not None:
                return client.interrupt_session(session)
            return client.cancel(run_id)

        started = time.monotonic()
        try:
            # One call: the core plans and, unless the plan needs a person's look,
            # approves it (executing the cell is the approval) and runs it.
            planned = run_sync(
                client.plan_and_run(
                    RunOptions(
                        language=language,
                        code=cell,
                        timeout_sec=args.timeout,
                        stdin=stdin,
                        backend=args.backend,
                        allow_network=args.network,
                        env=args.env or (),
                        source="cell",
                        inputs=absolute_paths(args.inputs),
                        session=args.session,
                    ),
                    confirmed=args.yes,
                    on_output=echo,
                    run_id=run_id,
                ),
                on_interrupt=interrupt,
            )
        except KeyboardInterrupt:
            # The stop could not be asked for (a second interrupt, a gone server, a run
            # not started yet): the call was cancelled on this side, which closes its
            # stream on the server and stops the run there.
            echo.flush()
            raise SandboxStopped(stopped_message(time.monotonic() - started, client.path)) from None
        except SandboxError as exc:
            echo.flush()
            if exc.code == PlanBlocked.code:  # the core's words: why, and that nothing ran
                raise SandboxBlocked(exc.message) from None
            with usage_errors():
                raise
        except BaseException:
            echo.flush()
            raise
        if planned.result is None:  # a high warning: the card asks a person first
            return self._show_card(planned.plan, client, args)
        result = planned.result
        echo.finish()  # a large output's scroll box, before the footer
        self._store(result, args.out)
        if result.cancelled:
            echo.flush()
            raise SandboxStopped(stopped_message(result.duration_ms / 1000, client.path), result)
        if self.show_footer:
            # After the snippet's last output, whichever stream it was on.
            echo.write("stdout", footer(result, client.path) + "\n")
        if result.files:
            echo.flush()
            self._save_files(client, result, planned.plan, args)
        raise_error = self.raise_error if args.raise_error is None else args.raise_error
        if raise_error and not result.ok:
            echo.flush()
            raise SandboxRunError(result)
        return None

    @staticmethod
    def _save_files(
        client: SandboxClient, result: RunResult, plan: ExecutionPlan, args: Any
    ) -> None:
        """Save what the run left under ``out/`` where the cell's options say."""
        caps = plan.spec.limits.display
        for refused in save_run_files(client, result, args.output_dir, force=args.force, caps=caps):
            print(f"sandbox: {refused}", file=sys.stderr)

    def _show_card(self, plan: ExecutionPlan, client: SandboxClient, args: Any) -> None:
        def on_result(result: RunResult) -> None:
            # Called in the card's output area: the files' lines and images show there.
            self._store(result, args.out)
            if result.files and not result.cancelled:
                self._save_files(client, result, plan, args)

        card = self.views.approval_card(plan, client, on_result=on_result)
        self.card = card
        display(card)
        focus(card)

    @line_magic("sandbox")
    def sandbox_line(self, line: str) -> Any:
        """``%sandbox status | settings | config | debug | last | plans | approve | reject``.

        ``plans`` lists the plans waiting for approval (an agent's, say) with an
        Approve / Reject card each; ``approve PLAN_ID`` / ``reject PLAN_ID`` decide
        one by id. Approving here never runs the plan: whoever made it runs it.
        """
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"sandbox: {exc}") from None
        if not words:
            raise UsageError(f"usage: {LINE_USAGE}")
        command, rest = words[0], words[1:]
        handler = getattr(self, f"_line_{command}", None)
        if handler is None:
            raise UsageError(f"sandbox: unknown subcommand {command!r}; usage: {LINE_USAGE}")
        with usage_errors():
            return handler(rest)

    def _line_batch(self, rest: list[str]) -> Any:
        """Many snippets under one approval, with a progress bar; answers the results table."""
        from .batch import batch_line

        return batch_line(self.user_ns, rest, self.views, self.client)

    def _line_session(self, rest: list[str]) -> None:
        """``list`` this caller's sessions, ``restart NAME`` or ``stop NAME`` one."""
        match rest:
            case ["list"]:
                sessions = run_sync(self.client.sessions())
                if not sessions:
                    print("no session is open (%%sandbox --session NAME starts one)")
                for info in sessions:
                    network = "network on" if info["network"] else "network off"
                    print(f"{info['name']:24} {info['state']:5} {info['cells']:4} cells  {network}")
            case ["restart", name]:
                run_sync(self.client.restart_session(name))
                print(f"Restarted session {name}: its variables and files are gone.")
            case ["stop", name]:
                run_sync(self.client.stop_session(name))
                print(f"Stopped session {name}: nothing of it is left.")
            case _:
                raise UsageError(SESSION_USAGE)

    def _line_status(self, rest: list[str]) -> None:
        status = run_sync(self.client.status())
        sys.stdout.write(status_text(status, verbose="--verbose" in rest))
        print(f"{'launched by':16} {launcher(self.client.path)}")

    def _line_settings(self, rest: list[str]) -> Any:
        """The settings panel, as the cell's result (``panel = %sandbox settings`` keeps it)."""
        return self.views.settings_panel(self.client)

    def _line_config(self, rest: list[str]) -> None:
        yes = "--yes" in rest
        changes = parse_assignments([word for word in rest if word != "--yes"], what="config")
        question = None
        if changes and not yes:
            now = run_sync(self.client.status())
            question = off_confirmation(
                changes, now["settings"]["backend"], now["allowed_backends"]
            )
            if question is not None and not self._confirmed(question):
                print("Not saved: the settings are as they were.")
                return
        # Reached only when the user said yes to a due question (or gave --yes).
        confirmed = yes or question is not None
        status = run_sync(self.client.configure(changes, confirm=confirmed)) if changes else None
        status = status or run_sync(self.client.status())
        for key, value in status["settings"].items():
            print(f"{key:18} {json.dumps(value)}")

    @staticmethod
    def _confirmed(question: str) -> bool:
        """Ask ``question`` in the notebook (an input box); a frontend without one says how."""
        print(question)
        try:
            answer = input("Type yes to confirm: ")
        except (StdinNotImplementedError, EOFError, OSError):
            raise UsageError(
                "sandbox: this needs a confirmation and the frontend cannot ask for one; "
                "add --yes: %sandbox config --yes KEY=VALUE ..."
            ) from None
        return answer.strip().lower() in ("y", "yes")

    def _line_debug(self, rest: list[str]) -> None:
        """Walk the whole sandbox path (always in-process: it probes this machine)."""
        from ..sandbox.diagnostics import failed, render_text, run_diagnostics

        if rest not in ([], ["--matrixlab"]):
            raise UsageError("usage: %sandbox debug [--matrixlab]")
        client = self.client
        service = client.service if isinstance(client, LocalClient) else SandboxService()
        stages = run_sync(run_diagnostics(service, matrixlab=bool(rest)))
        print(render_text(stages))
        if failed(stages):
            raise UsageError("sandbox: a diagnostic stage failed (see above)")

    def _line_last(self, rest: list[str]) -> dict[str, Any] | None:
        if self.last is None:
            print("no %%sandbox cell has run in this kernel yet")
            return None
        return self.last

    def _line_plans(self, rest: list[str]) -> None:
        """A card per pending plan; Approve only approves (the planner runs it)."""
        if rest:
            raise UsageError("usage: %sandbox plans")
        client = self.client
        if isinstance(client, LocalClient):
            print(NO_SERVER_NOTE)
        plans = run_sync(client.pending())
        self.plan_cards = [self.views.approval_card(plan, client, runs=False) for plan in plans]
        if not plans:
            print("no plans are waiting for approval")
        for card in self.plan_cards:
            display(card)
        if self.plan_cards:
            focus(self.plan_cards[0])

    def _line_approve(self, rest: list[str]) -> None:
        plan_id = self._plan_id("approve", rest)
        run_sync(self.client.approve(plan_id, for_planner=True))
        print(f"Approved {plan_id}: whoever made it can now run it (the token goes to them).")

    def _line_reject(self, rest: list[str]) -> None:
        plan_id = self._plan_id("reject", rest)
        run_sync(self.client.reject(plan_id))
        print(f"Rejected {plan_id}: it will not run.")

    @staticmethod
    def _plan_id(command: str, rest: list[str]) -> str:
        if len(rest) != 1:
            raise UsageError(f"usage: %sandbox {command} PLAN_ID")
        return rest[0]
