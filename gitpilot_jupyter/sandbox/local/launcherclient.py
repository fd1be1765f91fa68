"""The server's side of the launcher (:mod:`.launcher`): start it, hand it runs, adopt them.

One launcher per server process, started on first need (:data:`LAUNCHER`) and again
when it has died: a run is never started without its wall, it is refused instead
(:class:`LauncherError`). A started run is a :class:`LaunchedRun`: the surface the
backend uses of a process (its pipes read on the running loop, its exit reported by
the launcher that reaps it, its kill through a pidfd).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import logging
import marshal
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .launcher import MAX_FDS, MAX_REQUEST, receive

log = logging.getLogger(__name__)

#: The launcher's program, run by this interpreter with nothing but the stdlib.
PROGRAM = Path(__file__).with_name("launcher.py")
#: How much of a run's pipe one read takes.
READ_SIZE = 65536


def read_pipe(fd: int, reader: asyncio.StreamReader) -> bool:
    """Feed what the readable pipe ``fd`` holds to ``reader``; True at its end (the
    fd's reader callback is then removed: the caller closes it and ends ``reader``)."""
    try:
        data = os.read(fd, READ_SIZE)
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        data = b""
    if data:
        reader.feed_data(data)
        return False
    asyncio.get_running_loop().remove_reader(fd)
    return True


class LauncherError(OSError):
    """The launcher could not start a run (it said why, or it is gone)."""


class Launcher:
    """This process's launcher: started once, restarted when it has died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: socket.socket | None = None
        self._owner = -1
        self._at_exit = False
        #: Ready children the launcher told of, oldest first.
        self._ready: list[_Ready] = []

    @property
    def pid(self) -> int | None:
        """The launcher's pid while it runs (tests)."""
        proc = self._proc
        return proc.pid if proc is not None and proc.poll() is None else None

    def _running(self) -> socket.socket:
        """The control socket of a running launcher, started now if need be (locked)."""
        proc, control = self._proc, self._control
        if proc is not None and control is not None and self._owner == os.getpid():
            if proc.poll() is None:
                return control
            log.warning("the launcher exited (%s); starting it again", proc.returncode)
        self._stop()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(PROGRAM), str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,  # no terminal's ^C reaches it
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control, self._owner = ours, os.getpid()
        if not self._at_exit:
            atexit.register(self.close)  # its runs end with the server, and it is reaped
            self._at_exit = True
        return ours

    def ensure(self) -> None:
        """Start the launcher now unless it runs (off the event loop: it takes ~20 ms)."""
        with self._lock:
            self._running()

    def _stop(self) -> None:
        control, proc = self._control, self._proc
        self._control = self._proc = None
        ready, self._ready = self._ready, []
        for child in ready:  # they die with the launcher
            for fd in (child.pidfd, child.sock, child.reply):
                with contextlib.suppress(OSError):
                    os.close(fd)
        if control is not None and self._owner == os.getpid():
            control.close()  # the launcher sees the end and exits
        if proc is not None and self._owner == os.getpid():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)

    def close(self) -> None:
        """Stop the launcher (its runs are killed); the next run starts another."""
        with self._lock:
            self._stop()

    def _take_ready(self, control: socket.socket) -> _Ready | None:
        """A ready child the launcher told of, else None (locked)."""
        while True:
            try:
                data, fds = receive(control, 4096, 3, socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                return None
            message = marshal.loads(data) if data else None
            if len(fds) != 3 or not (isinstance(message, tuple) and message[0] == "ready"):
                for fd in fds:
                    os.close(fd)
                if not data:
                    break  # the launcher is gone: the next send finds out
                continue
            self._ready.append(_Ready(int(message[1]), *fds))
        return self._ready.pop(0) if self._ready else None

    def send(self, request: Mapping[str, object], fds: Sequence[int]) -> Sent:
        """Hand one run to the launcher's ready child, else to the launcher itself.

        A launcher found dead is started again once; a second failure is an error.
        """
        data = marshal.dumps(dict(request))
        if len(data) > MAX_REQUEST or len(fds) + 1 > MAX_FDS:
            raise LauncherError(f"a run's request is too large ({len(data)} bytes)")
        with self._lock:
            for attempt in (1, 2):
                control = self._running()
                ready = self._take_ready(control)
                while ready is not None:
                    sent = ready.hand(data, fds)
                    if sent is not None:
                        return sent
                    ready = self._take_ready(control)
                ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                try:
                    socket.send_fds(control, [data], [theirs.fileno(), *fds])
                    return Sent(ours, None, -1)
                except OSError as exc:
                    ours.close()
                    self._stop()
                    if attempt == 2:
                        raise LauncherError(f"the launcher is not reachable: {exc}") from exc
                finally:
                    theirs.close()
        raise AssertionError("unreachable")


@dataclass
class _Ready:
    """A run's process forked ahead by the launcher, waiting on its socket for its run."""

    pid: int
    pidfd: int
    sock: int
    reply: int

    def hand(self, data: bytes, fds: Sequence[int]) -> Sent | None:
        """Send it the run; None (everything of it closed) when it is no longer there."""
        report_r, report_w = os.pipe()
        try:
            with socket.socket(fileno=self.sock) as sock:
                self.sock = -1
                socket.send_fds(sock, [data], [report_w, *fds])
        except OSError:
            os.close(report_r)
            for fd in (self.pidfd, self.reply):
                os.close(fd)
            return None
        finally:
            os.close(report_w)
        return Sent(socket.socket(fileno=self.reply), (self.pid, self.pidfd), report_r)


@dataclass(frozen=True)
class Sent:
    """A run handed over: its reply socket (the launcher's reports), and for a ready
    child its pid and pidfd, and the pipe that ends at its exec (or says why not)."""

    reply: socket.socket
    started: tuple[int, int] | None
    report: int


@dataclass(frozen=True)
class WallParts:
    """What the launcher's child builds its :class:`.wall.Wall` of: the ruleset fd (the
    server keeps it), the seccomp filter, the rlimits ``(resource, soft, hard)`` and the
    ids to drop to."""

    ruleset_fd: int
    bpf: bytes | None
    rlimits: tuple[tuple[int, int, int], ...]
    ids: tuple[int, int] | None


#: This process's launcher.
LAUNCHER = Launcher()


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():  # (readable again before the waiter ran)
        ready.set_result(None)


async def _receive(sock: socket.socket) -> tuple[object, list[int]]:
    """The next message on a run's reply socket, and its fds; ``(None, [])`` at its end."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, fds = receive(sock, 4096, 1)
        except (BlockingIOError, InterruptedError):
            ready = loop.create_future()
            loop.add_reader(sock.fileno(), _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(sock.fileno())
            continue
        except OSError:
            return None, []
        return (marshal.loads(data) if data else None), fds


async def launch(
    argv: Sequence[str],
    *,
    cwd: str,
    env: Mapping[str, str],
    wall: WallParts,
    join_fds: Sequence[int],
    stdin: bool,
) -> LaunchedRun:
    """Start ``argv`` behind ``wall`` through the launcher; raises :class:`LauncherError`
    (with the child's own error: the wall not set, the exec failed) when it did not start.

    ``join_fds``: the run cgroup's join files; ``stdin``: a pipe (else ``/dev/null``).
    Cancelled before the launcher's answer, a run that started is killed when it comes.
    """
    request = {
        "argv": list(argv),
        "env": dict(env),
        "cwd": cwd,
        "rlimits": list(wall.rlimits),
        "ids": wall.ids,
        "bpf": wall.bpf,
    }
    theirs: list[int] = []
    mine: list[int] = []
    try:
        if stdin:
            read, write = os.pipe()
            theirs.append(read)
            mine.append(write)
        else:
            theirs.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
            mine.append(-1)
        for _ in range(2):
            read, write = os.pipe()
            mine.append(read)
            theirs.append(write)
        sent = LAUNCHER.send(request, [*theirs, wall.ruleset_fd, *join_fds])
    except BaseException:
        for fd in (*theirs, *mine):
            if fd >= 0:
                os.close(fd)
        raise
    for fd in theirs:
        os.close(fd)
    sock = sent.reply
    sock.setblocking(False)
    answer = asyncio.ensure_future(_answer(sent))
    try:
        message, fds = await asyncio.shield(answer)
    except BaseException:
        for fd in mine:
            if fd >= 0:
                os.close(fd)
        answer.add_done_callback(functools.partial(_kill_unwanted, sock))
        raise
    if not (isinstance(message, tuple) and message[:1] == ("started",) and fds):
        sock.close()
        for fd in (*mine, *fds):
            if fd >= 0:
                os.close(fd)
        if isinstance(message, tuple) and message[:1] == ("failed",):
            raise LauncherError(str(message[1]))
        raise LauncherError("the launcher ended before the run started")
    run = LaunchedRun(int(message[1]), fds[0], sock, mine[0], mine[1], mine[2])
    await run.attach()
    return run


async def _answer(sent: Sent) -> tuple[object, list[int]]:
    """Whether the run started, as the launcher says it (:func:`_receive`), or for a
    ready child as its report pipe does: its end at exec, or the reason it failed."""
    if sent.started is None:
        return await _receive(sent.reply)
    pid, pidfd = sent.started
    try:
        failure = await _read_to_end(sent.report)
    except BaseException:
        os.close(pidfd)
        raise
    if failure:
        os.close(pidfd)
        return ("failed", failure.decode(errors="replace")), []
    return ("started", pid), [pidfd]


async def _read_to_end(fd: int) -> bytes:
    """All ``fd`` gives until its end (then closed), read on the running loop."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    out = b""
    try:
        while True:
            try:
                chunk = os.read(fd, 4096)
            except (BlockingIOError, InterruptedError):
                ready = loop.create_future()
                loop.add_reader(fd, _wake, ready)
                try:
                    await ready
                finally:
                    loop.remove_reader(fd)
                continue
            if not chunk:
                return out
            out += chunk
    finally:
        os.close(fd)


def _kill_unwanted(sock: socket.socket, answer: asyncio.Future[tuple[object, list[int]]]) -> None:
    """A run started for a caller that is gone: killed, with its session."""
    sock.close()
    if answer.cancelled() or answer.exception() is not None:
        return
    message, fds = answer.result()
    for fd in fds:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        os.close(fd)
    if isinstance(message, tuple) and message[:1] == ("started",):
        with contextlib.suppress(OSError):
            os.killpg(int(message[1]), signal.SIGKILL)


class LaunchedRun:
    """A run the launcher started, with the surface the backend uses of a process."""

    def __init__(
        self, pid: int, pidfd: int, reply: socket.socket, stdin: int, stdout: int, stderr: int
    ) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._reply = reply
        self._returncode: int | None = None
        self._exit: asyncio.Future[None] | None = None
        self._stdin_fd = stdin
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        #: The output pipes being read: (fd, its reader), while not at their end.
        self._pipes: list[tuple[int, asyncio.StreamReader]] = []
        self._fds = [stdout, stderr]

    async def attach(self) -> None:
        """Read the output pipes and the launcher's report on this loop (fd callbacks:
        no transport to set up, as :class:`.pool.WarmChild` does)."""
        loop = asyncio.get_running_loop()
        readers = []
        for fd in self._fds:
            reader = asyncio.StreamReader(limit=READ_SIZE, loop=loop)
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._readable, fd, reader)
            self._pipes.append((fd, reader))
            readers.append(reader)
        self.stdout, self.stderr = readers
        self._exit = loop.create_future()
        loop.add_reader(self._reply.fileno(), self._reported)
        if self._stdin_fd >= 0:
            pipe = os.fdopen(self._stdin_fd, "wb", buffering=0)
            self._stdin_fd = -1
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), pipe
            )
            self.stdin = asyncio.StreamWriter(transport, protocol, None, loop)

    def _readable(self, fd: int, reader: asyncio.StreamReader) -> None:
        if not read_pipe(fd, reader):
            return
        self._pipes.remove((fd, reader))
        os.close(fd)
        reader.feed_eof()

    def _reported(self) -> None:
        try:
            data = self._reply.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        message = marshal.loads(data) if data else None
        if isinstance(message, tuple) and message[:1] == ("exited",):
            self._returncode = int(message[1])
        else:  # the launcher is gone: the run no longer has its reaper; end it
            log.warning("the launcher ended while run %d ran: it is killed", self.pid)
            self.kill()
            self._returncode = -signal.SIGKILL
        self._end_report()

    def _end_report(self) -> None:
        with contextlib.suppress(RuntimeError, ValueError):
            asyncio.get_running_loop().remove_reader(self._reply.fileno())
        self._reply.close()
        if self._exit is not None and not self._exit.done():
            self._exit.set_result(None)

    @property
    def returncode(self) -> int | None:
        """The exit status (negative: killed by that signal), None while it runs."""
        return self._returncode

    async def wait(self) -> int:
        """Wait for the exit (not for the pipes)."""
        assert self._exit is not None
        await asyncio.shield(self._exit)
        return -1 if self._returncode is None else self._returncode

    def kill(self) -> None:
        """SIGKILL the run's process (through its pidfd: never another process)."""
        if self._pidfd >= 0:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def close_pipes(self) -> None:
        """Release the pipes, the report socket and the pidfd now."""
        loop = asyncio.get_running_loop()
        for fd, _ in self._pipes:
            with contextlib.suppress(RuntimeError, ValueError):
                loop.remove_reader(fd)
            with contextlib.suppress(OSError):
                os.close(fd)
        self._pipes.clear()
        if self.stdin is not None:
            self.stdin.close()
        if self._reply.fileno() >= 0:
            self._end_report()
        if self._pidfd >= 0:
            os.close(self._pidfd)
            self._pidfd = -1
