"""One started, waiting sandbox (see :mod:`gitpilot_jupyter.sandbox.local.pool`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path

from .. import prestart
from ..cleanup import remove_tree
from ..isolation import Launch
from ..launcherclient import READ_SIZE as _READ_SIZE
from .child import WarmChild
from .config import PoolKey

#: How long a starting slot is waited for before it counts as ready anyway.
_READY_WAIT_SEC = 5.0
_READY_POLL_SEC = 0.002


@dataclass
class Slot:
    """One started, waiting sandbox (see the module docstring)."""

    key: PoolKey
    workdir: Path
    launch: Launch
    popen: subprocess.Popen[bytes]
    #: The FIFO's write end (the code goes here) and a read end that keeps what was
    #: written until the chain has opened the FIFO itself.
    writer: int
    keeper: int
    #: What of the host the launch was made from (compared again at hand-out).
    fingerprint: Hashable
    #: True: the interpreter is started too, waiting in its hook (:mod:`.prestart`).
    prestarted: bool = False
    #: The read end of the chain's own stdout and stderr (a pre-started slot's: see
    #: :data:`.prestart.CHAIN_FIFO`; -1: none).
    chain_output: int = -1
    #: A pidfd on bubblewrap's init, PID 1 of the sandbox (-1: none). The kernel ends
    #: that process only once every other process of its PID namespace is gone, so
    #: its exit says that nothing of the run is left (see :meth:`WarmChild.gone`).
    sandbox_init: int = -1
    #: How many levels below the slot's process the one waiting for the code is (None:
    #: bubblewrap's chain, 2 pre-started, else 1; 0: the process itself).
    waits_at: int | None = None
    born: float = field(default_factory=time.monotonic)
    ready: bool = False
    #: Fds on the chain's mount namespaces, held from the host: the staging one
    #: (``unshare``'s, which bubblewrap's monitor is the last process of) and the
    #: sandbox's. Each namespace's teardown (unmounting its tree, which waits for an
    #: RCU grace period) then happens when this side lets go, after the answer,
    #: instead of in the run's exit, which the answer waits for.
    mount_ns: tuple[int, ...] = ()
    #: The display nonce in the slot's environment (see :mod:`...rich.wire`).
    display_nonce: str = ""

    def alive(self) -> bool:
        """True while the chain still runs (it reaps a dead one)."""
        return self.popen.poll() is None

    def close_fds(self) -> None:
        """Close the FIFO ends this side still holds (safe to call twice)."""
        for name in ("writer", "keeper", "chain_output", "sandbox_init"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, -1)

    def release_mount_namespace(self) -> None:
        """Let go of the chain's mount namespaces (their teardown happens here if last)."""
        fds, self.mount_ns = self.mount_ns, ()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def destroy(self) -> None:
        """Kill the slot's processes and remove its cgroup and folder (blocking)."""
        self.close_fds()
        self.launch.kill_all()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=5)
        for pipe in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self.launch.out_hold is not None:
            self.launch.out_hold.close()
        self.launch.cleanup()
        remove_tree(self.workdir)
        self.release_mount_namespace()

    def wait_ready(self, timeout: float = _READY_WAIT_SEC) -> bool:
        """Block until bubblewrap waits for the code (its setup done); False if it died.

        Seen from ``/proc``: a child of the chain sleeping in a pipe read (the FIFO),
        or for a pre-started interpreter, a grandchild (bubblewrap's init is between).
        """
        deadline = time.monotonic() + timeout
        pid = self.popen.pid
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            depth = self.waits_at if self.waits_at is not None else 1 + self.prestarted
            if _child_reads_pipe(pid, depth):
                self.ready = True
                init = _sandbox_init(pid)
                if init is not None:
                    self.mount_ns = _mount_namespaces(pid, init)
                    with contextlib.suppress(OSError):
                        self.sandbox_init = os.pidfd_open(init)
                return True
            time.sleep(_READY_POLL_SEC)
        self.ready = True  # slow host: still usable, the run just waits for the rest
        return True

    def chain_text(self) -> bytes:
        """What the chain wrote to its own stdout and stderr so far (never waits).

        Before the hand-out, that is the interpreter's start (a warning of ``site``,
        say), which a cold run's stderr would show before the snippet's output; after
        it, only a message of bubblewrap's own.
        """
        parts = []
        while self.chain_output >= 0:
            try:
                chunk = os.read(self.chain_output, _READ_SIZE)
            except OSError:  # nothing more now (EAGAIN), or the pipe is gone
                break
            if not chunk:
                break
            parts.append(chunk)
        return b"".join(parts)

    async def hand_out(self) -> WarmChild:
        """The slot's chain as a run's child: its pipes read on this loop, starting with
        what the chain wrote before (see :meth:`chain_text`), and its exit watched."""
        child = WarmChild(self.popen, self.sandbox_init)
        try:
            await child.attach(early_stderr=self.chain_text())
        except BaseException:
            child.close_pipes()  # what it attached before it failed
            raise
        return child

    def send_now(self, code: str) -> bytes:
        """Write the code into the FIFO as far as it takes it now (never waits).

        Returns what is left for :meth:`deliver`: nothing when all of it went in (the
        FIFO is then closed, the code's end) or when the slot is dead.
        """
        data = code.encode("utf-8")
        view = memoryview(prestart.frame(data) if self.prestarted else data)
        while view:
            try:
                view = view[os.write(self.writer, view) :]
            except BlockingIOError:
                return bytes(view)
            except (BrokenPipeError, ConnectionResetError):
                break  # a dead slot: the run's end says so
        self._close_writer()
        return b""

    async def deliver(self, rest: bytes) -> bool:
        """Write ``rest`` (of :meth:`send_now`) into the FIFO and close it; False when
        the slot is dead."""
        try:
            await write_all(self.writer, rest)
        except (BrokenPipeError, ConnectionResetError):
            return False
        finally:
            self._close_writer()
        return True

    def _close_writer(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.writer)
        self.writer = -1


def _child_reads_pipe(pid: int, depth: int = 1) -> bool:
    """True when a process ``depth`` levels below ``pid`` (0: ``pid``) sleeps in a pipe read."""
    if depth == 0:
        try:
            return "pipe_read" in Path(f"/proc/{pid}/wchan").read_text()
        except OSError:
            return False
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return False
    for child in children:
        if depth > 1:
            if _child_reads_pipe(int(child), depth - 1):
                return True
            continue
        with contextlib.suppress(OSError):
            if "pipe_read" in Path(f"/proc/{child}/wchan").read_text():
                return True
    return False


def _sandbox_init(pid: int) -> int | None:
    """The child of the chain ``pid`` that is bubblewrap's init (PID 1 of a new PID
    namespace), or None. (With network on, slirp4netns is a child of the chain too.)"""
    try:
        own = os.readlink(f"/proc/{pid}/ns/pid")
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{child}/ns/pid") != own:
                return int(child)
    return None


def _mount_namespaces(pid: int, init: int) -> tuple[int, ...]:
    """Fds on the mount namespaces of the chain ``pid`` and of the sandbox (``init``'s).

    A namespace that cannot be opened (another user's, or gone) is left out: it is
    then torn down in the run's exit, as without this.
    """
    fds: list[int] = []
    for owner in (pid, init):
        with contextlib.suppress(OSError):
            fds.append(os.open(f"/proc/{owner}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
    return tuple(fds)


async def write_all(fd: int, data: bytes) -> None:
    """Write ``data`` to the non-blocking ``fd`` without blocking the event loop."""
    loop = asyncio.get_running_loop()
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
            continue
        except BlockingIOError:
            pass
        ready = loop.create_future()
        loop.add_writer(fd, ready.set_result, None)
        try:
            await ready
        finally:
            loop.remove_writer(fd)
