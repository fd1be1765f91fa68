"""Supervision of a started run (cold or warm): drain, feed, time, stop and kill it.

What :class:`~.backends.SubprocessSandbox` does with a chain once it runs: both
pipes are drained concurrently under the output cap; on timeout the whole group is
killed and the output produced so far is kept; so it is when the run is stopped
(``request.stop``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Coroutine
from typing import IO, Any, Protocol

from ..backend import OutputCallback, RunRequest
from ..output import CappedText
from ..results import MEMORY_EXCEEDED, RunResult
from ..rich import DISPLAY_STREAM, DisplayOutputs, encode_display
from ..rich.wire import Frame, FrameSplitter, Text
from .isolation import Launch
from .launcherclient import LaunchedRun
from .pool import Slot, WarmChild, write_all

_READ_SIZE = 65536
#: How long to wait for the pipes to drain once the run is over. Only a process that
#: escaped every kill could hold them longer; a busy event loop needs the margin.
_PIPE_GRACE_SEC = 2.0
#: How often to look at the exit status while a background process holds the pipes.
_EXIT_POLL_SEC = 0.1
#: How long a warm run that ended waits for its sandbox's init to end (it follows the
#: chain's exit within a fraction of a millisecond) before its cgroup is killed instead.
GONE_WAIT_SEC = 0.25


def _kill_group(pid: int) -> None:
    """SIGKILL the process group led by ``pid`` (ignoring a group already gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def _drain(
    stream: asyncio.StreamReader | None,
    name: str,
    sink: CappedText,
    on_output: OutputCallback | None,
    frames: FrameSplitter | None = None,
    outputs: DisplayOutputs | None = None,
) -> None:
    """Read a pipe to its end; keep up to the cap, discard the rest.

    With ``frames`` (stdout), the display frames are taken out first: the cap counts
    text only, and each output kept goes to ``outputs`` (and ``on_output``) in order.
    """
    if stream is None:
        return
    while True:
        chunk = await stream.read(_READ_SIZE)
        if not chunk:
            break
        if frames is None:
            text = sink.feed(chunk)
            if text and on_output is not None:
                await on_output(name, text)
            continue
        for part in frames.feed(chunk):
            await _take(part, name, sink, on_output, outputs)
    if frames is not None:
        for part in frames.finish():
            await _take(part, name, sink, on_output, outputs)
    tail = sink.finish()
    if tail and on_output is not None:
        await on_output(name, tail)


async def _take(
    part: Text | Frame,
    name: str,
    sink: CappedText,
    on_output: OutputCallback | None,
    outputs: DisplayOutputs | None,
) -> None:
    """One part of stdout: text to the capped sink, a frame checked into ``outputs``."""
    if isinstance(part, Frame):
        item = outputs.take(part, sink.chars) if outputs is not None else None
        if item is not None and on_output is not None:
            await on_output(DISPLAY_STREAM, encode_display(item))
        return
    text = sink.feed(part.data)
    if text and on_output is not None:
        await on_output(name, text)


async def end_run(launch: Launch, proc: Child, *, ended: bool) -> None:
    """Make sure nothing of a run is left before it answers.

    Whatever is left (background children, a timed-out tree) dies with it: the
    temp dir is about to disappear. The launch kills first, while the tree's
    parent links are still intact. A warm chain that ended on its own (``ended``)
    may prove there is nothing left instead: its sandbox's init has ended, and a
    PID namespace's init ends only after everything else in it. Cancelled while it
    waits for that, it kills all the same.
    """
    if launch.out_hold is not None:
        launch.out_hold.grab()  # the run's out/, while a process of its namespace lives
    nothing_left = False
    try:
        if ended and isinstance(proc, WarmChild):
            nothing_left = await proc.gone(GONE_WAIT_SEC)
    finally:
        if not nothing_left:
            launch.kill_all()
            _kill_group(proc.pid)


async def _exited(proc: Child) -> None:
    """Return once the child itself has exited.

    ``proc.wait()`` also waits for the pipes to close, which a background process
    that kept them open may never do; its exit status is polled beside it. (A warm
    slot's chain is watched through a pidfd, and a launcher's run by the launcher's
    report, which the pipes do not hold up: awaited directly, a few turns of the loop
    sooner.)
    """
    if isinstance(proc, WarmChild | LaunchedRun):
        await proc.wait()
        return
    waiter = asyncio.ensure_future(proc.wait())
    try:
        while not waiter.done() and proc.returncode is None:
            await asyncio.wait({waiter}, timeout=_EXIT_POLL_SEC)
    finally:
        waiter.cancel()


def _close_pipes(proc: Child) -> None:
    """Release the pipes' file descriptors now, even when a reader was cancelled.

    asyncio closes them only once every pipe saw EOF; a pipe still held by an
    escaped process would otherwise keep its fd until garbage collection.
    """
    if isinstance(proc, WarmChild | LaunchedRun):
        proc.close_pipes()
        return
    transport = getattr(proc, "_transport", None)
    if transport is not None:
        transport.close()


async def _feed_stdin(proc: asyncio.subprocess.Process | LaunchedRun, data: str) -> None:
    if proc.stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.write(data.encode("utf-8"))
        await proc.stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        proc.stdin.close()


async def _feed_pipe(pipe: IO[bytes], data: str) -> None:
    """Write a warm slot's stdin text into its pipe, then close it (EOF for the snippet)."""
    fd = pipe.fileno()
    os.set_blocking(fd, False)
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        await write_all(fd, data.encode("utf-8"))
    with contextlib.suppress(OSError):
        pipe.close()


async def _feed_slot(slot: Slot, rest: bytes, stdin: str | None) -> None:
    """Hand a warm slot the rest of its code (if any), then its stdin text (if any)."""
    if rest:
        await slot.deliver(rest)
    pipe = slot.popen.stdin
    if pipe is not None and stdin is not None:
        await _feed_pipe(pipe, stdin)


class Child(Protocol):
    """What the backend uses of a running chain (an asyncio process, or a warm slot's)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    async def wait(self) -> int: ...

    def kill(self) -> None: ...


async def supervise(
    request: RunRequest,
    launch: Launch,
    proc: Child,
    feed: Coroutine[Any, Any, None] | None,
    result: RunResult,
    on_output: OutputCallback | None,
    nonce: str = "",
) -> None:
    """Drain, time, stop and kill a started run (cold or warm) and fill ``result``
    (``nonce``: the run's display nonce, whose frames become ``result.outputs``)."""
    out = CappedText(request.max_output_bytes)
    err = CappedText(request.max_output_bytes)
    outputs = DisplayOutputs(request.limits.display)
    frames = FrameSplitter(nonce, outputs.max_payload)
    readers = [
        asyncio.ensure_future(_drain(proc.stdout, "stdout", out, on_output, frames, outputs)),
        asyncio.ensure_future(_drain(proc.stderr, "stderr", err, on_output)),
    ]
    if feed is not None:
        readers.append(asyncio.ensure_future(feed))
    exited = asyncio.ensure_future(_exited(proc))
    waiters: set[asyncio.Future[Any]] = {exited}
    if request.stop is not None:
        waiters.add(asyncio.ensure_future(request.stop.wait()))
    ended = False
    try:
        done, _ = await asyncio.wait(
            waiters, timeout=request.timeout_sec, return_when=asyncio.FIRST_COMPLETED
        )
        ended = exited in done
        if not ended:
            # Stopped by someone, or out of time: either way the tree is killed below.
            result.cancelled = bool(done)
            result.timed_out = not done
    finally:
        for waiter in waiters:
            waiter.cancel()
        await end_run(launch, proc, ended=ended)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            # Not proc.wait(): a detached grandchild holding the pipes would hold it too.
            await _exited(proc)
        done, pending = set(readers), set[asyncio.Future[None]]()
        if not all(task.done() for task in readers):  # (asyncio.wait takes a turn)
            done, pending = await asyncio.wait(readers, timeout=_PIPE_GRACE_SEC)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for task in done:
            task.result()
        _close_pipes(proc)
    result.stdout = out.text
    result.stderr = err.text
    result.outputs = outputs.items
    result.notes += outputs.notes()
    result.truncated = out.truncated or err.truncated
    if result.timed_out or result.cancelled:
        result.exit_code = -1
    else:
        code = proc.returncode if proc.returncode is not None else -1
        # A child killed by a signal reports 128 + signal, as a shell does.
        result.exit_code = 128 - code if code < 0 else code
        if launch.memory_exceeded():
            result.stderr += MEMORY_EXCEEDED
