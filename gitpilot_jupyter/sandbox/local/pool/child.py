"""A slot's chain once handed out: the process surface the backend uses of it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from typing import IO

from ..launcherclient import READ_SIZE, read_pipe


class WarmChild:
    """A slot's chain once handed out, with the surface the backend uses of a process.

    (``asyncio`` cannot adopt a process started elsewhere: the pipes are read on the
    running loop here, and the exit is seen through a pidfd.)
    """

    def __init__(self, popen: subprocess.Popen[bytes], sandbox_init: int = -1) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        #: The output pipes being read: (pipe, its reader), while not at their end.
        self._pipes: list[tuple[IO[bytes], asyncio.StreamReader]] = []
        self._exit: asyncio.Future[None] | None = None
        self._pidfd = -1
        #: The slot's pidfd on bubblewrap's init (the slot closes it), and its exit.
        self._init_pidfd = sandbox_init
        self._gone: asyncio.Future[None] | None = None

    async def attach(self, early_stderr: bytes = b"") -> None:
        """Read the output pipes on this loop and watch for the exit.

        ``early_stderr``: what the run wrote to its stderr before its pipe (the
        interpreter's start in a pre-started slot), read ahead of the pipe's data.
        The pipes are read by plain fd callbacks into stream readers: an asyncio pipe
        transport would take a turn of the loop each to attach. (No back-pressure is
        needed: the backend drains each chunk on the same loop, and caps what it keeps.)
        """
        loop = asyncio.get_running_loop()
        readers = []
        for pipe in (self.popen.stdout, self.popen.stderr):
            assert pipe is not None
            reader = asyncio.StreamReader(limit=READ_SIZE, loop=loop)
            if early_stderr and pipe is self.popen.stderr:
                reader.feed_data(early_stderr)
            os.set_blocking(pipe.fileno(), False)
            loop.add_reader(pipe.fileno(), self._readable, pipe, reader)
            self._pipes.append((pipe, reader))
            readers.append(reader)
        self.stdout, self.stderr = readers
        self._exit = loop.create_future()
        self._pidfd = os.pidfd_open(self.pid)
        loop.add_reader(self._pidfd, self._exited)
        if self._init_pidfd >= 0:
            self._gone = loop.create_future()
            loop.add_reader(self._init_pidfd, self._init_exited)

    def _readable(self, pipe: IO[bytes], reader: asyncio.StreamReader) -> None:
        if not read_pipe(pipe.fileno(), reader):
            return
        self._pipes.remove((pipe, reader))
        pipe.close()
        reader.feed_eof()

    def _exited(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(self._pidfd)
        os.close(self._pidfd)
        self._pidfd = -1
        # A readable pidfd is an exited child: the reap needs no wait (but allow one).
        if self.popen.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
                self.popen.wait(timeout=1)
        if self._exit is not None and not self._exit.done():
            self._exit.set_result(None)

    def _init_exited(self) -> None:
        asyncio.get_running_loop().remove_reader(self._init_pidfd)
        if self._gone is not None and not self._gone.done():
            self._gone.set_result(None)

    async def gone(self, timeout: float) -> bool:
        """True once bubblewrap's init has exited, within ``timeout`` seconds.

        The kernel lets a PID namespace's init end only after it has killed and
        reaped every other process of that namespace, and every process the snippet
        can start is in it. So after the chain's exit, this is the proof that nothing
        of the run is left, with no look at its cgroup. False (no init watched, or it
        has not ended in time): the caller kills the run's cgroup, as a cold run's.
        """
        gone = self._gone
        if gone is None:
            return False
        if not gone.done():
            await asyncio.wait({gone}, timeout=timeout)
        return gone.done()

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), None while it runs."""
        return self.popen.returncode

    async def wait(self) -> int:
        """Wait for the exit (not for the pipes)."""
        assert self._exit is not None
        await asyncio.shield(self._exit)
        code = self.popen.returncode
        return -1 if code is None else code

    def kill(self) -> None:
        """SIGKILL the chain's head."""
        with contextlib.suppress(OSError):
            self.popen.kill()

    def close_pipes(self) -> None:
        """Release the pipes and the pidfd now (the slot closes its init's pidfd)."""
        for pipe, _ in self._pipes:
            with contextlib.suppress(RuntimeError, ValueError):
                asyncio.get_running_loop().remove_reader(pipe.fileno())
            pipe.close()
        self._pipes.clear()
        if self._gone is not None and not self._gone.done():
            with contextlib.suppress(RuntimeError, ValueError):
                asyncio.get_running_loop().remove_reader(self._init_pidfd)
        if self._pidfd >= 0:
            with contextlib.suppress(RuntimeError, ValueError):
                asyncio.get_running_loop().remove_reader(self._pidfd)
            with contextlib.suppress(OSError):
                os.close(self._pidfd)
            self._pidfd = -1
