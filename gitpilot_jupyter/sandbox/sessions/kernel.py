"""One session: an IPython kernel in a sandbox run that lives between cells.

:meth:`KernelSession.start` starts the kernel's run through the backend's
long-lived launch (:meth:`.local.backends.SubprocessSandbox.start_long_lived`: the
run's engine, launch plan, cgroup and rlimits, which hold for the whole session),
finds the kernel's process, and connects a ``jupyter_client`` to its ``ipc``
sockets (:mod:`.boot`). :meth:`KernelSession.run_cell` sends one cell and answers
the run envelope: stream output as ``on_output("stdout"/"stderr", text)``; rich
outputs (``display_data``, ``execute_result``) checked as a run's display frames are
(:class:`..rich.DisplayOutputs`, the session's caps per cell), streamed as
``on_output(DISPLAY_STREAM, encode_display(item))`` and kept in ``result.outputs``.
A cell's inputs are copied as approved and linked at ``./NAME`` before it runs, and
what it wrote or changed under ``out/`` is collected after it (:mod:`.files`).
A cell over its timeout (or stopped) is interrupted; one that does not stop within
:data:`INTERRUPT_GRACE_SEC` ends the session, which the result then reports lost.
Everything the kernel sends is its code's: checked and capped, never trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..backend import OutputCallback, RunRequest
from ..errors import InputRefused, SandboxError
from ..inputs import RunInput
from ..outfiles import OutCaps
from ..output import CappedText
from ..results import MEMORY_EXCEEDED, RunResult, new_run_id
from ..rich import DISPLAY_STREAM, DisplayOutputs, encode_display
from ..rich.bundles import MIB
from .boot import NO_KERNEL_MARK, Connection, boot_code, link_code, new_connection, no_kernel
from .files import SessionFiles
from .outputs import frame_of

if TYPE_CHECKING:
    from jupyter_client.asynchronous.client import AsyncKernelClient

    from ..local.backends import SubprocessSandbox
    from ..local.longlived import LongLived

log = logging.getLogger(__name__)

#: How long a session may take to start (the kernel's imports on a busy machine).
START_TIMEOUT_SEC = 60.0
#: How long an interrupted cell may take to stop before its session is ended.
INTERRUPT_GRACE_SEC = 5.0
#: The largest message the server takes from a kernel (a longer one drops its connection),
#: at least twice the session's display cap.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
#: The run's file name (the kernel's process is the one whose last argument it is).
BOOT_FILE = "inline.py"
#: How long the kernel may take to link a cell's inputs (it is idle: one cell at a time).
LINK_TIMEOUT_SEC = 30.0
#: How much of the kernel's reason a refused link quotes.
MAX_REASON_CHARS = 300
#: The result's notes when a cell ended its session.
LOST_NOTE = "session lost: its kernel ended, and its state with it; start it again"
#: Makes the folder a cell's ``out/`` files are copied into (None: none could be made).
OutFolder = Callable[[], "Path | None"]
_POLL_SEC = 0.005
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def session_command(name: str) -> list[str]:
    """The command a session cell's result shows."""
    return ["ipykernel", "--session", name]


@dataclass
class CellOutcome:
    """What one cell gave: its run envelope (its rich outputs in ``result.outputs``), and
    whether the session was lost."""

    result: RunResult
    lost: bool = False
    #: The folder the cell's ``out/`` files were copied into (None: nothing was collected).
    out_dir: Path | None = None

    @property
    def outputs(self) -> list[dict[str, Any]]:
        """The cell's rich outputs, in order (``result.outputs``)."""
        return self.result.outputs


@dataclass
class _Cell:
    out: CappedText
    err: CappedText
    outputs: DisplayOutputs
    on_output: OutputCallback | None
    failed: bool = False
    notes: list[str] = field(default_factory=list)

    async def write(self, sink: CappedText, name: str, text: str) -> None:
        kept = sink.feed(text.encode("utf-8", errors="replace"))
        if kept and self.on_output is not None:
            await self.on_output(name, kept)


class KernelSession:
    """A started session's kernel: its run, connection and client. One cell at a time."""

    def __init__(
        self,
        name: str,
        process: LongLived,
        connection: Connection,
        client: AsyncKernelClient,
        kernel_pid: int,
        request: RunRequest,
        backend: str,
        files: SessionFiles,
    ) -> None:
        self.name = name
        self.process = process
        self.connection = connection
        self.client = client
        #: The kernel's host pid (the interpreter below the launch chain).
        self.kernel_pid = kernel_pid
        #: What the session was started with (network, limits, environment).
        self.request = request
        self.backend = backend
        #: Its files in (the inbox) and out (``out/``).
        self.files = files
        self.busy = False
        self._lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def start(
        cls, backend: SubprocessSandbox, name: str, request: RunRequest
    ) -> KernelSession:
        """Start a session's kernel for ``request`` (its network, limits and environment).

        Raises the backend's refusal, :class:`~..errors.SessionUnavailable` when the
        interpreter has no ipykernel, or :class:`~..errors.SandboxError` when the kernel
        does not come up.
        """
        connection = new_connection()
        files = await asyncio.to_thread(SessionFiles)
        try:
            return await cls._start(backend, name, request, connection, files)
        except BaseException:
            await asyncio.to_thread(files.close)
            raise

    @classmethod
    async def _start(
        cls,
        backend: SubprocessSandbox,
        name: str,
        request: RunRequest,
        connection: Connection,
        files: SessionFiles,
    ) -> KernelSession:
        boot = dataclasses.replace(
            request,
            language="python",
            code=boot_code(
                connection, request.limits.display.item_mb * MIB, network=request.allow_network
            ),
            stdin=None,
            file=None,
            filename=None,
            inputs=(files.staged(),),  # the inbox, bound read-only for the session's life
        )
        process = await backend.start_long_lived(boot)
        try:
            interpreter = backend.interpreters.resolve("python") or "python"
            pid = await _kernel_pid(process, connection, interpreter)
            if pid is None:
                tail = process.tail.decode("utf-8", errors="replace")
                if NO_KERNEL_MARK in tail:
                    detail = tail.split(NO_KERNEL_MARK, 1)[1].splitlines()[0]
                    raise no_kernel(interpreter, detail)
                raise SandboxError(
                    f"the session's kernel did not start: {tail.strip()[-2000:] or 'no output'}",
                    code="session_failed",
                )
            max_message = max(MAX_MESSAGE_BYTES, 2 * request.limits.display.item_mb * MIB)
            client = _client(connection.for_server(pid, process.workdir), max_message)
            try:
                await asyncio.wait_for(client.wait_for_ready(), START_TIMEOUT_SEC)
                # Its stage is made (the kernel is up in it): its out/ is opened now.
                await asyncio.to_thread(files.hold, process.launch.out_hold)
            except BaseException:
                _close_client(client)
                raise
        except BaseException:
            await process.stop()
            raise
        return cls(name, process, connection, client, pid, boot, backend.name, files)

    def alive(self) -> bool:
        """True while the session's run has not ended."""
        return self.process.alive()

    async def run_cell(
        self,
        code: str,
        *,
        timeout_sec: float,
        max_output_bytes: int,
        on_output: OutputCallback | None = None,
        stop: asyncio.Event | None = None,
        run_id: str | None = None,
        plan_id: str | None = None,
        inputs: Sequence[RunInput] = (),
        out_folder: OutFolder | None = None,
        out_caps: OutCaps | None = None,
    ) -> CellOutcome:
        """Run one (approved) cell in the kernel; see the module docstring.

        ``inputs`` are the cell's (as approved: a changed one raises
        :class:`~..errors.ApprovalError` before the cell runs); what the cell wrote or
        changed under ``out/`` is copied within ``out_caps`` into the folder
        ``out_folder`` makes (called only when ``out/`` holds something; None, or a
        folder of None: nothing is collected), listed in ``result.files``, and the folder
        is the outcome's ``out_dir``.
        """
        async with self._lock:
            self.busy = True
            try:
                if inputs:
                    await self._put_inputs(inputs)
                outcome = await self._run(
                    code, timeout_sec, max_output_bytes, on_output, stop, run_id, plan_id
                )
                if out_folder is not None and not outcome.lost and not self.files.nothing_out():
                    # (A folder only then: most cells leave out/ as it was.)
                    outcome.out_dir = out_folder()
                if outcome.out_dir is not None:
                    found = await asyncio.to_thread(
                        self.files.collect, outcome.out_dir, out_caps or self.request.out_caps
                    )
                    outcome.result.files = found.files
                    outcome.result.notes += found.notes
                return outcome
            finally:
                self.busy = False

    async def _put_inputs(self, inputs: Sequence[RunInput]) -> None:
        """Copy the cell's inputs into the inbox (as approved) and have the kernel link
        them at ``./NAME``; raises before the cell runs if either fails."""
        seen_as, names = await asyncio.to_thread(self.files.stage, inputs)
        try:
            msg_id = self.client.execute(
                link_code(seen_as, names), silent=True, store_history=False, allow_stdin=False
            )
            try:
                reply = await asyncio.wait_for(self._shell_reply(msg_id), LINK_TIMEOUT_SEC)
            except TimeoutError:
                reply = {"status": "error", "evalue": "the kernel did not answer"}
            if reply.get("status") != "ok":
                why = str(reply.get("evalue") or reply.get("status"))  # (the kernel's words)
                raise InputRefused(
                    f"the inputs could not be put in session {self.name!r}'s folder: "
                    f"{why[:MAX_REASON_CHARS]}"
                )
        except BaseException:
            await asyncio.to_thread(self.files.unstage, seen_as)
            raise
        await asyncio.to_thread(self.files.linked, seen_as, names)

    async def _run(
        self,
        code: str,
        timeout_sec: float,
        max_output_bytes: int,
        on_output: OutputCallback | None,
        stop: asyncio.Event | None,
        run_id: str | None,
        plan_id: str | None,
    ) -> CellOutcome:
        started = time.monotonic()
        result = RunResult(
            backend=self.backend,
            language="python",
            command=session_command(self.name),
            exit_code=-1,
            run_id=run_id or new_run_id(),
            plan_id=plan_id,
            sandbox_id=self.name,
            isolation=list(self.process.layers),
        )
        cell = _Cell(
            CappedText(max_output_bytes),
            CappedText(max_output_bytes),
            DisplayOutputs(self.request.limits.display),  # a run's caps, per cell
            on_output,
        )
        outcome = CellOutcome(result)
        # One cell at a time: nothing is queued behind it for an error to abort.
        msg_id = self.client.execute(
            code, store_history=True, allow_stdin=False, stop_on_error=False
        )
        collect = asyncio.ensure_future(self._collect(msg_id, cell))
        ended = self.process.ended
        waiters: set[asyncio.Future[Any]] = {collect, ended}
        stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
        if stopped is not None:
            waiters.add(stopped)
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=timeout_sec, return_when=asyncio.FIRST_COMPLETED
            )
            if collect not in done and ended not in done:
                # Out of time, or stopped: interrupt, and end the session if that fails.
                result.cancelled = stopped is not None and stopped in done
                result.timed_out = not result.cancelled
                self.interrupt()
                done, _ = await asyncio.wait(
                    {collect, ended},
                    timeout=INTERRUPT_GRACE_SEC,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            # (Its messages failing: the session was stopped meanwhile.)
            outcome.lost = (
                collect not in done or collect.cancelled() or collect.exception() is not None
            )
        except asyncio.CancelledError:
            self.interrupt()  # its caller is gone (a closed stream): the cell stops too
            raise
        finally:
            for waiter in (collect, stopped):  # (not ended: the session's own, for its life)
                if waiter is not None:
                    waiter.cancel()
        if outcome.lost:
            memory = self.process.memory_exceeded()
            await self.stop()
            if memory:
                await cell.write(cell.err, "stderr", MEMORY_EXCEEDED)
            result.notes.append(LOST_NOTE)
            result.exit_code = 128 + signal.SIGKILL if memory and not result.timed_out else -1
        elif not (result.timed_out or result.cancelled):
            result.exit_code = 1 if cell.failed else 0
        for sink, name in ((cell.out, "stdout"), (cell.err, "stderr")):
            tail = sink.finish()
            if tail and on_output is not None:
                await on_output(name, tail)
        result.stdout, result.stderr = cell.out.text, cell.err.text
        result.truncated = cell.out.truncated or cell.err.truncated
        result.notes += cell.notes + cell.outputs.notes()
        result.outputs = cell.outputs.items
        result.duration_ms = int((time.monotonic() - started) * 1000)
        return outcome

    async def _collect(self, msg_id: str, cell: _Cell) -> None:
        """Read the cell's messages until the kernel is idle again and has replied."""
        idle = replied = False
        shell = asyncio.ensure_future(self._reply(msg_id, cell))
        try:
            while not idle:
                try:
                    msg = await self.client.get_iopub_msg()
                except Exception:  # a message that is not one (the kernel's code sent it)
                    if self._closed:
                        raise  # stopped meanwhile: no message will come
                    log.debug("session %s: a malformed message", self.name, exc_info=True)
                    continue
                if _parent(msg) != msg_id:
                    continue
                idle = await self._handle(msg, cell)
            replied = True
            await asyncio.wait_for(shell, INTERRUPT_GRACE_SEC)
        finally:
            if not replied or not shell.done():
                shell.cancel()

    async def _reply(self, msg_id: str, cell: _Cell) -> None:
        content = await self._shell_reply(msg_id)
        if content.get("status") == "aborted":
            cell.failed = True
            cell.notes.append("the kernel aborted this cell: it did not run")

    async def _shell_reply(self, msg_id: str) -> dict[str, Any]:
        """The content of the kernel's reply to ``msg_id`` (empty: the session stopped)."""
        while not self._closed:
            with contextlib.suppress(Exception):  # (a malformed message, as above)
                msg = await self.client.get_shell_msg()
                if _parent(msg) == msg_id:
                    content = msg.get("content")
                    return content if isinstance(content, dict) else {}
        return {}

    async def _handle(self, msg: dict[str, Any], cell: _Cell) -> bool:
        """Take one of the cell's messages; True once the kernel is idle."""
        kind, content = msg.get("msg_type"), msg.get("content")
        if not isinstance(content, dict):
            return False
        if kind == "stream":
            text, name = content.get("text"), content.get("name")
            if isinstance(text, str):
                sink = cell.err if name == "stderr" else cell.out
                await cell.write(sink, "stderr" if name == "stderr" else "stdout", text)
        elif kind in ("display_data", "execute_result"):
            frame = frame_of(content, cell.outputs.max_payload)
            item = cell.outputs.take(frame, stdout_at=len(cell.out.text))
            if item is not None and cell.on_output is not None:
                await cell.on_output(DISPLAY_STREAM, encode_display(item))
        elif kind == "error":
            cell.failed = True
            lines = content.get("traceback")
            text = "\n".join(map(str, lines)) if isinstance(lines, list) else str(content)
            await cell.write(cell.err, "stderr", _ANSI.sub("", text) + "\n")
        elif kind == "status":
            return content.get("execution_state") == "idle"
        return False

    def interrupt(self) -> None:
        """SIGINT to the kernel (a ``KeyboardInterrupt`` in the cell that runs); where the
        server may not signal it (another uid), the kernel's own interrupt request."""
        try:
            os.kill(self.kernel_pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        except PermissionError:
            self.client.control_channel.send(self.client.session.msg("interrupt_request", {}))

    async def stop(self) -> None:
        """End the session: its client, every process of its run, its cgroup and folder."""
        self._closed = True
        _close_client(self.client)
        try:
            await self.process.stop()
        finally:
            await asyncio.to_thread(self.files.close)

    @property
    def workdir(self) -> Path:
        """The run folder on the host (the kernel's own folder is only in its sandbox)."""
        return self.process.workdir


def _parent(msg: dict[str, Any]) -> object:
    header = msg.get("parent_header")
    return header.get("msg_id") if isinstance(header, dict) else None


async def _kernel_pid(process: LongLived, connection: Connection, interpreter: str) -> int | None:
    """The kernel's host pid once its shell socket is bound; None if the run ended first."""
    deadline = time.monotonic() + START_TIMEOUT_SEC
    while process.alive() and time.monotonic() < deadline:
        pid = process.find(interpreter, BOOT_FILE)
        if pid is not None and os.path.exists(
            connection.socket(pid, process.workdir, "control_port")
        ):
            return pid
        await asyncio.sleep(_POLL_SEC)
    await asyncio.sleep(0.05)  # the last output of a run that ended: drained
    return None


def _client(info: dict[str, Any], max_message: int) -> AsyncKernelClient:
    import zmq
    import zmq.asyncio
    from jupyter_client.asynchronous.client import AsyncKernelClient

    context = zmq.asyncio.Context()
    context.setsockopt(zmq.MAXMSGSIZE, max_message)
    client = AsyncKernelClient(context=context)
    client.load_connection_info(info)  # type: ignore[arg-type]
    client.start_channels(shell=True, iopub=True, stdin=False, hb=False, control=True)
    return client


def _close_client(client: AsyncKernelClient) -> None:
    with contextlib.suppress(Exception):
        client.stop_channels()
    with contextlib.suppress(Exception):
        client.context.destroy(linger=0)
