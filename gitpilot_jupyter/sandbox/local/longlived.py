"""A long-lived process started like a run: the same isolator, launch plan and limits.

:meth:`.backends.SubprocessSandbox.start_long_lived` prepares and spawns a request's
code exactly as a cold run (its run folder, cgroup, rlimits, engine), but hands the
started chain back instead of supervising it: no timeout, and its limits (memory,
processes, disk) hold for as long as it lives. Its owner ends it with :meth:`LongLived.stop`,
which kills every process of it and removes its cgroup and folder. A session's kernel
is the first such process (:mod:`..sessions`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .cleanup import remove_tree
from .isolation import Launch
from .launcherclient import LaunchedRun
from .launches import _descendants
from .supervise import _close_pipes, _exited, _kill_group

#: How much of the chain's own output (the pipes outside the kernel's channels) is kept.
_TAIL_BYTES = 16384
_READ_SIZE = 65536
#: How long a stop waits for its killed processes to finish exiting (a large one frees its
#: memory first); the cgroup's own kill waits as long.
_EXIT_WAIT_SEC = 2.0


@dataclass
class LongLived:
    """A started chain, its launch (cgroup, rlimits, kill) and its run folder."""

    workdir: Path
    launch: Launch
    proc: asyncio.subprocess.Process | LaunchedRun
    #: The layers in force, as a run's ``isolation`` lists them.
    layers: list[str]
    #: The last bytes the chain wrote to its stdout and stderr (drained all along, so a
    #: chatty process never blocks on a full pipe).
    tail: bytearray = field(default_factory=bytearray)
    _drains: list[asyncio.Task[None]] = field(default_factory=list)
    _stopped: bool = False
    #: Done once the chain's first process has exited (watched once for its whole life).
    ended: asyncio.Future[None] = field(init=False)

    def __post_init__(self) -> None:
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                self._drains.append(asyncio.ensure_future(self._drain(stream)))
        self.ended = asyncio.ensure_future(_exited(self.proc))

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_READ_SIZE):
            self.tail += chunk
            del self.tail[:-_TAIL_BYTES]

    @property
    def pid(self) -> int:
        """The host pid of the chain's first process."""
        return self.proc.pid

    def alive(self) -> bool:
        """True while the chain's first process has not exited."""
        return self.proc.returncode is None and not self._stopped

    def memory_exceeded(self) -> bool:
        """True when the kernel killed a process of it for its memory limit."""
        return self.launch.memory_exceeded()

    def descendants(self) -> Iterator[int]:
        """Host pids below the chain's first process, parents before children."""
        yield from _descendants(self.pid)

    def find(self, interpreter: str, filename: str) -> int | None:
        """The host pid of the shallowest process below the chain that is ``interpreter``
        running ``filename`` (its first and last arguments), or None while there is none."""
        first, last = os.fsencode(interpreter), os.fsencode(filename)
        for pid in self.descendants():
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
                if len(argv) > 1 and argv[0] == first and argv[-1] == last:
                    return pid
        return None

    async def stop(self) -> None:
        """Kill every process of it, then remove its cgroup and run folder (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        # Watched before the kill: a killed process leaves its cgroup's list while it is
        # still exiting, so only its pidfd tells when it is gone.
        exiting = _pidfds(self.descendants())
        self.launch.kill_all()
        _kill_group(self.proc.pid)
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        await asyncio.shield(self.ended)
        for task in self._drains:
            task.cancel()
        for task in self._drains:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        _close_pipes(self.proc)
        await asyncio.to_thread(_wait_exited, exiting, _EXIT_WAIT_SEC)
        await asyncio.to_thread(self._remove)

    def _remove(self) -> None:
        try:
            if self.launch.out_hold is not None:
                self.launch.out_hold.close()  # (a session's out/, open since its start)
            self.launch.cleanup()
        finally:
            remove_tree(self.workdir)


def _pidfds(pids: Iterable[int]) -> list[int]:
    """A pidfd for each of these processes still there (to wait for their exit)."""
    fds = []
    for pid in pids:
        with contextlib.suppress(OSError):
            fds.append(os.pidfd_open(pid))
    return fds


def _wait_exited(pidfds: list[int], timeout: float) -> None:
    """Wait until every process watched by ``pidfds`` has exited (at most ``timeout``
    seconds), then close them."""
    poller = select.poll()
    for fd in pidfds:
        poller.register(fd, select.POLLIN)
    left = set(pidfds)
    deadline = time.monotonic() + timeout
    try:
        while left and (remaining := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(remaining * 1000):
                poller.unregister(fd)
                left.discard(fd)
    finally:
        for fd in pidfds:
            os.close(fd)
