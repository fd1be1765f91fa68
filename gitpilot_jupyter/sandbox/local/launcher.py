"""The launcher: a small process that forks, walls and execs the namespace-free runs.

A wall is put up by the run's own process between fork and exec. Done in the
server (a ``preexec_fn``), that makes CPython ``fork`` the whole server, whose page
tables take milliseconds to copy, where a launch without one is a ``vfork``. So the
server starts this program once (:mod:`.launcherclient`), with nothing imported
but the standard library and :mod:`.wall`, and hands it each cold run over a unix
socket pair: one message with what the run is (argv, environment, folder, the
rlimits, the uid, the seccomp filter) and, by ``SCM_RIGHTS``, its fds: the run's own
reply socket, stdin, stdout, stderr, its Landlock ruleset and its cgroup join files.

The child of this process, in this order: its stdio, its folder, a session of its
own (``setsid``: a ready child, below, makes it while it waits), the run cgroup (a
write of ``0`` to each join file), then
:meth:`.wall.Wall.apply` (rlimits, the id drop, no_new_privs, Landlock, seccomp),
every other fd closed, ``execve``. Any step that fails ends the child before exec and
the run is refused with that step's error, as the ``preexec_fn`` path does. On the
reply socket the launcher answers ``("started", pid)`` with a pidfd of the child (the
server kills through it: no pid reuse can redirect the kill), or ``("failed",
reason)``; then ``("exited", returncode)`` once it has reaped the child. The server's
end of the control socket closing (the server is gone) makes it kill every run it
started and exit.

So that no fork is on a run's path either, the launcher forks the next run's process
ahead (:meth:`Launcher._fork_ready`): it closes everything of the launcher, waits on a
socket of its own (``PR_SET_PDEATHSIG``: it dies with the launcher while it waits),
and the launcher tells the server of it (its pid, a pidfd, that socket and its reply
socket). The server hands the run to it directly, with a pipe that ends at its exec
or says why it failed; it takes the same steps. A run sent to the launcher itself
(none ready: the first, or a burst) is forked then.
"""

from __future__ import annotations

import array
import contextlib
import marshal
import os
import selectors
import signal
import socket
import sys
from collections.abc import Sequence
from typing import Any

try:
    from .wall import Wall, libc
except ImportError:  # run as the launcher's program: this folder's wall.py alone
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "gitpilot_wall", os.path.join(os.path.dirname(os.path.abspath(__file__)), "wall.py")
    )
    assert _spec is not None and _spec.loader is not None
    _wall = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _wall
    _spec.loader.exec_module(_wall)
    Wall = _wall.Wall  # type: ignore[misc]  # the same class, loaded by path
    libc = _wall.libc

#: The largest request (its environment and seccomp filter are most of it).
MAX_REQUEST = 1 << 20
#: The fds of a request before its cgroup join files: reply, stdin, stdout, stderr, ruleset.
REQUEST_FDS = 5
#: The most fds one request carries (the cgroup join files are one per hierarchy).
MAX_FDS = REQUEST_FDS + 16
#: The exit status a child that failed before exec ends with.
FAILED_BEFORE_EXEC = 127
_PR_SET_PDEATHSIG = 1


def receive(
    sock: socket.socket, size: int, max_fds: int, flags: int = 0
) -> tuple[bytes, list[int]]:
    """One message and the fds it carries, every fd close-on-exec.

    (``socket.recv_fds`` of Python 3.11 drops its ``flags``: no ``MSG_CMSG_CLOEXEC``,
    no ``MSG_DONTWAIT``.)
    """
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(
        size, socket.CMSG_LEN(max_fds * fds.itemsize), flags | socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - (len(payload) % fds.itemsize)])
    return data, list(fds)


def _send(sock: socket.socket, message: Any, fds: Sequence[int] = ()) -> None:
    with contextlib.suppress(OSError):  # the server gave up on this run
        socket.send_fds(sock, [marshal.dumps(message)], list(fds))


def _close(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _child(
    request: dict[str, Any],
    fds: Sequence[int],
    wall: Any,
    report: int,
    max_fd: int,
    *,
    in_session: bool = False,
) -> None:
    """The run's process from fork to exec (never returns); ``in_session``: it made its
    session already (a ready child, while it waited)."""
    _, stdin, stdout, stderr, _ = fds[:REQUEST_FDS]
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    os.chdir(request["cwd"])
    if not in_session:
        os.setsid()
    # What CPython's subprocess restores: Python ignores these, an exec keeps that.
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(number, signal.SIG_DFL)
    for fd in fds[REQUEST_FDS:]:
        os.write(fd, b"0")
    wall.apply()
    os.closerange(3, report)
    os.closerange(report + 1, max_fd)
    argv = request["argv"]
    os.execve(argv[0], argv, request["env"])


def _rehearse() -> None:
    """Use now, while waiting, what the run's steps will (their code, objects and
    C types): a page the child first writes to, a reference count's, is copied from the
    launcher then, and hundreds of such copies are better made before its run than on
    its path."""
    request = marshal.loads(marshal.dumps({"argv": ["-"], "env": {"-": "-"}, "bpf": bytes(8)}))
    Wall(-1, bpf=request["bpf"], rlimits=((signal.SIGPIPE, 0, 0),), ids=(0, 0))
    for number in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.getsignal(number)


class Launcher:
    """The launcher's state: the control socket, the runs it started, its ready child."""

    def __init__(self, control: socket.socket) -> None:
        self.control = control
        self.selector = selectors.DefaultSelector()
        self.selector.register(control, selectors.EVENT_READ, None)
        #: By pidfd: the child's pid and its run's reply socket.
        self.runs: dict[int, tuple[int, socket.socket]] = {}
        self.max_fd = os.sysconf("SC_OPEN_MAX")

    def serve(self) -> None:
        """Start runs and report their exits until the server's end closes."""
        self._fork_ready()
        while True:
            for key, _ in self.selector.select():
                if key.data is None:
                    if not self._request():
                        self._shutdown()
                        return
                elif key.data == "taken":
                    self.selector.unregister(key.fd)
                    os.close(key.fd)
                    self._fork_ready()
                else:
                    self._reap(key.fd)

    def _fork_ready(self) -> None:
        """Fork the next run's process ahead: it waits for its run, and the server, told
        of it, hands the run to it directly (no fork and no launcher on the run's path).

        It learns nothing of a run but by its own socket, dies with the launcher while
        it waits, and closes its end of ``taken`` by the time it execs (or fails): then
        the next is forked.
        """
        server_end, its_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        reply_server, reply_own = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        taken_r, taken_w = os.pipe()
        launcher = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                self._wait_for_run(launcher, its_end.fileno(), taken_w)
            finally:
                os._exit(FAILED_BEFORE_EXEC)
        its_end.close()
        os.close(taken_w)
        pidfd = os.pidfd_open(pid)
        _send(self.control, ("ready", pid), [pidfd, server_end.fileno(), reply_server.fileno()])
        server_end.close()
        reply_server.close()
        self.runs[pidfd] = (pid, reply_own)
        self.selector.register(pidfd, selectors.EVENT_READ, pid)
        self.selector.register(taken_r, selectors.EVENT_READ, "taken")

    def _wait_for_run(self, launcher: int, sock: int, taken: int) -> None:
        """The ready child: wait for one run on ``sock``, then become it."""
        libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != launcher:
            return  # the launcher is gone already
        # The run's session, made now: with autogroup scheduling a new session is a new
        # task group (0.02 ms at the median, 1.3 ms at the 90th percentile here), which
        # a run would otherwise wait for.
        os.setsid()
        _rehearse()
        low, high = sorted((sock, taken))
        os.closerange(3, low)  # nothing of the launcher's (nor of other runs) is kept
        os.closerange(low + 1, high)
        os.closerange(high + 1, self.max_fd)
        data, fds = receive(socket.socket(fileno=sock), MAX_REQUEST, MAX_FDS)
        if not data or len(fds) < REQUEST_FDS:
            return
        libc().prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0)  # the run is the server's now
        request = marshal.loads(data)
        report = fds[0]  # the server's: a failure's reason, else its end at exec
        try:
            wall = Wall(fds[4], bpf=request["bpf"], rlimits=request["rlimits"], ids=request["ids"])
            _child(request, fds, wall, report, self.max_fd, in_session=True)
        except BaseException as exc:  # every failure refuses the run
            with contextlib.suppress(BaseException):
                os.write(report, str(exc).encode(errors="replace")[:4096])

    def _request(self) -> bool:
        """Start one run; False when the server's end closed."""
        try:
            data, fds = receive(self.control, MAX_REQUEST, MAX_FDS)
        except InterruptedError:
            return True
        except OSError:
            return False
        if not data and not fds:
            return False
        if len(fds) < REQUEST_FDS:
            _close(fds)
            return True
        reply = socket.socket(fileno=fds[0])
        try:
            self._start(marshal.loads(data), fds, reply)
        except Exception as exc:  # reported to the run; the launcher serves on
            _send(reply, ("failed", f"the launcher could not start the run: {exc}"))
            reply.close()
        finally:
            _close(fds[1:])
        return True

    def _start(self, request: dict[str, Any], fds: Sequence[int], reply: socket.socket) -> None:
        """Fork, wall and exec a run sent to the launcher itself (no ready child)."""
        wall = Wall(fds[4], bpf=request["bpf"], rlimits=request["rlimits"], ids=request["ids"])
        report_r, report_w = os.pipe()
        try:
            pid = os.fork()
            if pid == 0:  # the run's process
                try:
                    _child(request, fds, wall, report_w, self.max_fd)
                except BaseException as exc:  # every failure refuses the run
                    with contextlib.suppress(BaseException):
                        os.write(report_w, str(exc).encode(errors="replace")[:4096])
                finally:
                    os._exit(FAILED_BEFORE_EXEC)
            os.close(report_w)
            report_w = -1
            pidfd = os.pidfd_open(pid)  # before the reap: the pid is still this child's
            failure = b""
            while chunk := os.read(report_r, 4096):  # empty at exec (the pipe is CLOEXEC)
                failure += chunk
        finally:
            os.close(report_r)
            if report_w >= 0:
                os.close(report_w)
        if failure:
            os.close(pidfd)
            os.waitpid(pid, 0)
            _send(reply, ("failed", failure.decode(errors="replace")))
            reply.close()
            return
        _send(reply, ("started", pid), [pidfd])
        self.runs[pidfd] = (pid, reply)
        self.selector.register(pidfd, selectors.EVENT_READ, pid)

    def _reap(self, pidfd: int) -> None:
        pid, reply = self.runs.pop(pidfd)
        self.selector.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        _send(reply, ("exited", os.waitstatus_to_exitcode(status)))
        reply.close()

    def _shutdown(self) -> None:
        """The server is gone: kill what it started (each run's session), and reap it."""
        for pidfd, (pid, reply) in list(self.runs.items()):
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(pid, 0)
            os.close(pidfd)
            reply.close()
        self.runs.clear()


def main(argv: Sequence[str]) -> int:
    """``python -I -S launcher.py FD``: serve the control socket ``FD``."""
    control = socket.socket(fileno=int(argv[1]))
    Launcher(control).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
