"""A warm pool of single-use sandboxes for the ``subprocess`` backend.

A slot is a cold run's launch started before its code exists: the same run folder,
cgroup, namespaces, size-capped tmpfs, dropped uid, seccomp filter and (network
on) slirp4netns, made by the same :meth:`~.isolation.Isolator.prepare` and
:mod:`.confine` chain. The only difference is the snippet file in the run folder
on the host: a FIFO instead of a file. Bubblewrap copies it into the run's
private tmpfs with ``--file``, the last step of its setup, so a slot waits there,
everything else done, until a run writes its code into the FIFO and closes it;
bubblewrap then finishes and execs the interpreter exactly as a cold run would.
stdin is what a cold run gets (``/dev/null``, or a pipe when the run gives text):
it is part of the slot's key.

A slot runs one snippet and then dies (it is a cold run's process tree from then
on: timeout, stop, kill and cleanup are the backend's own). Slots are kept per
:class:`PoolKey`, everything a launch is made from; before a slot is handed out
the parts of the host it was made from (hidden credential paths, interpreter
folders, the blocked networks) are looked at again, and every slot made from an
older view is dropped. Slots are started in worker threads, a few at a time;
how many are kept per key follows demand (the peak of runs at once, plus one),
within :class:`PoolConfig`'s limits, and an unused slot is retired.

The refill after a run waits a moment (:data:`REFILL_DELAY_SEC`) in its worker
before it starts the slot: starting one takes the GIL and a core, and right at a
run's end that time would come out of delivering the run's answer. The wait is in
the worker thread, not on the event loop, so a loop closed right after its call
(a kernel's ``run_sync``, the CLI) loses no refill; a run that finds its key
without an idle slot ends the wait at once (a burst needs its slots now).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..backend import ResourceLimits
from ..errors import InvalidSetting
from . import cgroups, prestart
from .cleanup import remove_tree
from .isolation import Launch

log = logging.getLogger(__name__)

#: ``auto`` (on where the host allows it), ``off``, or ``always`` (every run through a
#: slot, a miss waits for one: no cold path, as the test suite uses it).
POOL_ENV = "GITPILOT_SANDBOX_POOL"
POOL_MODES = ("auto", "off", "always")
#: The most idle slots (all keys together) for in-process use, when no trait sets it.
POOL_MAX_ENV = "GITPILOT_SANDBOX_POOL_MAX"
#: ``1``: a python slot's interpreter is started too, waiting for its code (:mod:`.prestart`).
PRESTART_ENV = "GITPILOT_SANDBOX_POOL_PRESTART"
#: How often the refiller looks at its slots without being asked (retire, reap).
_TICK_SEC = 5.0
#: After a slot failed to start, how long none is started (what failed it, a full disk or
#: a broken tool, fails the next one too: asked again at once, the pool would spin).
_RETRY_SEC = _TICK_SEC
#: How long a starting slot is waited for before it counts as ready anyway.
_READY_WAIT_SEC = 5.0
_READY_POLL_SEC = 0.002
_READ_SIZE = 65536
_WORKER_PREFIX = "gitpilot-pool"
#: How old the host's view compared at hand-out may be: runs handed out together (a
#: burst) share one look instead of one each. A cold run's view is older than this by
#: the time its bubblewrap starts.
FINGERPRINT_TTL_SEC = 0.02
#: How long the refill after a run waits before it starts a slot: long enough for the
#: run's answer to reach its caller (the core's return, a REST reply, a kernel's cell)
#: without a slot's start competing for the GIL and the core.
REFILL_DELAY_SEC = 0.01
#: How many run starts per key are remembered for the rate (see :meth:`WarmPool.target`).
_RATE_MEMORY = 64
#: A slot's start time assumed until one was measured (seconds from start to ready).
_READY_GUESS_SEC = 0.05


@dataclass(frozen=True)
class PoolConfig:
    """How big the pool may grow and how fast it refills (``SandboxApp.pool_*`` traits)."""

    mode: str = "auto"
    #: Idle (and starting) slots at most, all keys together.
    max_slots: int = 8
    #: Slots kept per key in use, whatever the demand.
    min_slots: int = 1
    #: A slot, or a key's demand, unused this long is retired (seconds).
    idle_sec: float = 300.0
    #: Slots started at once (each is a short burst of work on one core).
    spawn_concurrency: int = 2
    #: Start a python slot's interpreter ahead too (see :mod:`.prestart`).
    prestart: bool = True

    def __post_init__(self) -> None:
        if self.mode not in POOL_MODES:
            raise InvalidSetting(f"pool must be one of {list(POOL_MODES)}, got {self.mode!r}")
        if not 0 <= self.min_slots <= self.max_slots:
            raise InvalidSetting("pool_min_slots must be between 0 and pool_max_slots")
        if self.idle_sec <= 0 or self.spawn_concurrency < 1:
            raise InvalidSetting("pool_idle_sec must be positive, pool_spawn_concurrency >= 1")

    @property
    def enabled(self) -> bool:
        """True unless the pool is off (or may hold no slot)."""
        return self.mode != "off" and (self.max_slots > 0 or self.mode == "always")

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        default_mode: str = "auto",
        **given: Any,
    ) -> PoolConfig:
        """``given`` fields, the rest from ``GITPILOT_SANDBOX_POOL[_MAX]``, else defaults.

        ``default_mode`` is the mode when neither ``given`` nor the environment sets one
        (the CLI's one-shot commands: ``off``, a pool would outlive its only run).
        """
        env = os.environ if environ is None else environ
        mode = env.get(POOL_ENV, "").strip().lower()
        given.setdefault("mode", mode or default_mode)
        raw = env.get(POOL_MAX_ENV, "").strip()
        if raw and "max_slots" not in given:
            try:
                given["max_slots"] = int(raw)
            except ValueError:
                raise InvalidSetting(f"{POOL_MAX_ENV} must be a number, got {raw!r}") from None
        raw = env.get(PRESTART_ENV, "").strip().lower()
        if raw and "prestart" not in given:
            if raw not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
                raise InvalidSetting(f"{PRESTART_ENV} must be 1 or 0, got {raw!r}")
            given["prestart"] = raw in ("1", "true", "yes", "on")
        if given.get("max_slots", cls.max_slots) < given.get("min_slots", cls.min_slots):
            given["min_slots"] = given.get("max_slots", cls.max_slots)
        return cls(**given)


@dataclass(frozen=True)
class PoolKey:
    """Everything a slot's launch is made from: a run takes only a slot of its own key."""

    language: str
    interpreter: str
    allow_network: bool
    limits: ResourceLimits
    env: tuple[tuple[str, str], ...]
    #: True: stdin is a pipe the run's text is fed into; False: ``/dev/null``.
    stdin: bool


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
    #: :data:`.prestart.OUTPUT_FDS`; -1: none).
    chain_output: int = -1
    #: A pidfd on bubblewrap's init, PID 1 of the sandbox (-1: none). The kernel ends
    #: that process only once every other process of its PID namespace is gone, so
    #: its exit says that nothing of the run is left (see :meth:`WarmChild.gone`).
    sandbox_init: int = -1
    born: float = field(default_factory=time.monotonic)
    ready: bool = False
    #: Fds on the chain's mount namespaces, held from the host: the staging one
    #: (``unshare``'s, which bubblewrap's monitor is the last process of) and the
    #: sandbox's. Each namespace's teardown (unmounting its tree, which waits for an
    #: RCU grace period) then happens when this side lets go, after the answer,
    #: instead of in the run's exit, which the answer waits for.
    mount_ns: tuple[int, ...] = ()

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
            if _child_reads_pipe(pid, 2 if self.prestarted else 1):
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
    """True when a process ``depth`` levels below ``pid`` sleeps in a pipe read."""
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
            reader = asyncio.StreamReader(limit=_READ_SIZE, loop=loop)
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
        try:
            data = os.read(pipe.fileno(), _READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if data:
            reader.feed_data(data)
            return
        asyncio.get_running_loop().remove_reader(pipe.fileno())
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


@dataclass
class _Demand:
    in_flight: int = 0
    peak: int = 0
    last_peak: int = 0
    window_start: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    #: When the latest runs began (runs one after another need a slot each meanwhile).
    starts: deque[float] = field(default_factory=lambda: deque(maxlen=_RATE_MEMORY))

    def started_within(self, seconds: float, now: float) -> int:
        """How many runs began in the last ``seconds``."""
        return sum(1 for at in self.starts if now - at <= seconds)


#: Pools still open, closed at interpreter exit if their owner did not (CLI, kernels).
_OPEN: set[WarmPool] = set()


@atexit.register
def _close_all() -> None:
    for pool in list(_OPEN):
        pool.close_now()


class WarmPool:
    """Idle slots per key, refilled in worker threads to follow demand.

    ``spawn(key)`` starts a slot (blocking, in a worker thread); ``fingerprint(key)``
    is what the host looks like for that key now (compared with the slot's).
    """

    def __init__(
        self,
        config: PoolConfig,
        spawn: Callable[[PoolKey], Slot],
        fingerprint: Callable[[PoolKey], Hashable],
    ) -> None:
        self.config = config
        self._spawn = spawn
        self._fingerprint = fingerprint
        self._looked: dict[PoolKey, tuple[float, Hashable]] = {}
        self._idle: dict[PoolKey, deque[Slot]] = {}
        self._starting: dict[PoolKey, int] = {}
        self._demand: dict[PoolKey, _Demand] = {}
        # Re-entrant: close_now also runs from the backend's finalizer, which a
        # garbage-collection pass may call in a thread that holds this lock.
        self._lock = threading.RLock()
        self._executor: ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tick: asyncio.TimerHandle | None = None
        self._closed = False
        self._failed_at = -_RETRY_SEC  # when a slot last failed to start (monotonic)
        #: How long a slot takes from its start to ready (a moving average).
        self._ready_sec = _READY_GUESS_SEC
        self._spawning: set[Future[None]] = set()
        #: Wakes refills still waiting out their delay (a run found no idle slot, or
        #: the pool closes); the count tells a waiter it was woken.
        self._hurry = threading.Condition(self._lock)
        self._hurried = 0
        #: Counters for status and benchmarks.
        self.stats = {"hits": 0, "misses": 0, "spawned": 0, "failed": 0, "stale": 0}
        _OPEN.add(self)

    # -- hand-out -----------------------------------------------------------------------

    def take(self, key: PoolKey) -> Slot | None:
        """A ready, current slot of ``key`` (counted as a run of it), or None: go cold."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # a new loop (run_sync makes one per call in a kernel)
            self._loop, self._tick = loop, None
        self._begin(key)
        slot = self._pop(key)
        if slot is None:
            self.stats["misses"] += 1
        else:
            self.stats["hits"] += 1
        # While another slot of this key waits, the refill waits for the run's end
        # (done): starting a slot beside a run slows the run on a small machine.
        if slot is None or not self._idle.get(key):
            self._wake()  # a refill still waiting out its delay is wanted now
            self._fill()
        return slot

    async def acquire(self, key: PoolKey) -> Slot | None:
        """A slot of ``key``, started now when none is idle (mode ``always``); None when
        three in a row did not start (the run goes cold, ``warm`` false)."""
        slot = self.take(key)
        for _ in range(3):
            if slot is not None:
                break
            await asyncio.wrap_future(self._start(key))
            slot = self._pop(key)
        return slot

    def prime(self, key: PoolKey) -> None:
        """Expect runs of ``key``: start its slots now, as after one run (server start)."""
        self._begin(key)
        self.done(key)

    def done(self, key: PoolKey, *, refill: bool = True) -> None:
        """A run of ``key`` (warm or cold) ended: refill once its answer is delivered.

        The slots are started :data:`REFILL_DELAY_SEC` from now (their workers wait),
        not at once: the run's answer is still on its way to the caller. ``refill``
        False: the caller calls :meth:`refill` itself, once the answer is out.
        """
        with self._lock:
            demand = self._demand.get(key)
            if demand is not None:
                demand.in_flight = max(0, demand.in_flight - 1)
        if refill:
            self.refill()

    def refill(self) -> None:
        """Start the slots runs took (their workers wait :data:`REFILL_DELAY_SEC` first)."""
        self._fill(delay=REFILL_DELAY_SEC)

    def _wake(self) -> None:
        """End the delay of every refill waiting in a worker."""
        with self._hurry:
            self._hurried += 1
            self._hurry.notify_all()

    def _begin(self, key: PoolKey) -> None:
        now = time.monotonic()
        with self._lock:
            demand = self._demand.setdefault(key, _Demand())
            if now - demand.window_start > self.config.idle_sec / 4:
                demand.last_peak, demand.peak, demand.window_start = demand.peak, 0, now
            demand.in_flight += 1
            demand.peak = max(demand.peak, demand.in_flight)
            demand.last_used = now
            demand.starts.append(now)

    def _pop(self, key: PoolKey) -> Slot | None:
        while True:
            with self._lock:
                queue = self._idle.get(key)
                slot = queue.popleft() if queue else None
            if slot is None:
                return None
            if slot.alive() and self._current(slot):
                return slot
            self._retire(slot)

    def _current(self, slot: Slot) -> bool:
        """True when the host still looks as it did when the slot was made."""
        now = time.monotonic()
        looked = self._looked.get(slot.key)
        if looked is None or now - looked[0] > FINGERPRINT_TTL_SEC:
            looked = self._looked[slot.key] = (now, self._fingerprint(slot.key))
        if looked[1] == slot.fingerprint:
            return True
        # Something of the view changed (a credential folder appeared, a network
        # address moved): every slot made before is out of date.
        self.stats["stale"] += 1
        self.flush()
        return False

    # -- sizing and refill --------------------------------------------------------------

    def target(self, key: PoolKey) -> int:
        """How many slots ``key`` should have idle now (demand, within the limits)."""
        demand = self._demand.get(key)
        if demand is None or time.monotonic() - demand.last_used > self.config.idle_sec:
            return 0
        # Runs one after another use up slots faster than one refill makes them: as
        # many as began within one slot's start time are taken before it is ready.
        recent = demand.started_within(self._ready_sec, time.monotonic())
        want = max(demand.peak, demand.last_peak, recent) + 1
        return max(self.config.min_slots, min(want, self.config.max_slots))

    def _deficits(self) -> list[PoolKey]:
        """Keys to start a slot for, most recently used first, within the total cap."""
        with self._lock:
            held = sum(len(q) for q in self._idle.values()) + sum(self._starting.values())
            keys = sorted(self._demand, key=lambda k: -self._demand[k].last_used)
            out: list[PoolKey] = []
            for key in keys:
                have = len(self._idle.get(key, ())) + self._starting.get(key, 0)
                for _ in range(self.target(key) - have):
                    if held >= self.config.max_slots:
                        return out
                    out.append(key)
                    held += 1
            return out

    def _fill(self, delay: float = 0.0) -> None:
        """Start slots where keys are short (a few at once), retire unwanted ones.

        On the event loop, and quick: each slot starts in a worker thread, whose end
        calls this again. No task is kept on the loop (a loop may close at any time,
        as ``asyncio.run`` does); a timer looks again while slots are held. ``delay``:
        the workers wait that long before they start (see :meth:`done`).
        """
        if self._closed:
            return
        self._sweep()
        with self._lock:
            room = self.config.spawn_concurrency - len(self._spawning)
        if time.monotonic() - self._failed_at < _RETRY_SEC:
            room = 0  # runs start cold meanwhile; the next take() after it tries again
        for key in self._deficits()[: max(0, room)]:
            try:
                self._start(key, delay)
            except RuntimeError:  # the interpreter is shutting down: no thread starts now
                return
        if self._tick is None and self._loop is not None and (self._idle or self._spawning):
            with contextlib.suppress(RuntimeError):  # a closed loop: the next take() looks
                self._tick = self._loop.call_later(_TICK_SEC, self._ticked)

    def _ticked(self) -> None:
        self._tick = None
        self._fill()

    def _start(self, key: PoolKey, delay: float = 0.0) -> Future[None]:
        """Start one slot of ``key`` in a worker thread; it joins the idle ones when ready.

        The slot counts as starting from now on, also while its worker waits ``delay``
        (which :meth:`_wake` cuts short). Raises RuntimeError once the interpreter is
        shutting down (no thread starts then), counting nothing.
        """
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self.config.spawn_concurrency, thread_name_prefix=_WORKER_PREFIX
            )
        with self._lock:
            self._starting[key] = self._starting.get(key, 0) + 1
        try:
            future = self._executor.submit(self._spawn_ready, key, delay)
        except RuntimeError:  # the interpreter is shutting down: nothing starts
            with self._lock:
                self._starting[key] -= 1
            raise
        with self._lock:
            self._spawning.add(future)
        future.add_done_callback(self._started)
        return future

    def _started(self, future: Future[None]) -> None:
        # In the worker thread: its place is free now, whatever became of the loop
        # (a loop closed meanwhile, as run_sync's, never runs a callback again).
        with self._lock:
            self._spawning.discard(future)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # closed: the next take() looks
                loop.call_soon_threadsafe(self._fill)

    def _spawn_ready(self, key: PoolKey, delay: float = 0.0) -> None:
        # In a worker thread. The slot is handed to the pool here, not through the loop:
        # one whose waiter is gone (a closed loop) is still found and closed by the pool.
        if delay > 0:
            with self._hurry:
                woken = self._hurried
                self._hurry.wait_for(lambda: self._hurried != woken or self._closed, delay)
        slot = None
        ready = False
        try:
            if not self._closed:  # closed while it waited: nothing to start
                began = time.monotonic()
                slot = self._spawn(key)
                ready = slot.wait_ready()
                if ready:
                    self._ready_sec += (time.monotonic() - began - self._ready_sec) / 4
        except Exception as exc:  # a failed slot costs a cold run, never the server
            log.warning("gitpilot sandbox pool: a slot did not start: %s", exc)
            ready = False
        with self._lock:
            self._starting[key] = max(0, self._starting.get(key, 0) - 1)
            if slot is None and self._closed:
                return
            if ready and slot is not None and not self._closed:
                self._idle.setdefault(key, deque()).append(slot)
                self.stats["spawned"] += 1
                return
            self.stats["failed" if not self._closed else "spawned"] += 1
            self._failed_at = time.monotonic()
        if slot is not None:
            if not ready:
                log.warning("gitpilot sandbox pool: a slot exited before it was ready")
            slot.destroy()

    def _sweep(self) -> None:
        """Retire dead slots, slots older than ``idle_sec`` and those past their key's target."""
        now = time.monotonic()
        retired = []
        with self._lock:
            for key, queue in self._idle.items():
                keep = self.target(key)
                kept: deque[Slot] = deque()
                for slot in queue:
                    fresh = now - slot.born <= self.config.idle_sec and slot.alive()
                    if fresh and len(kept) < keep:
                        kept.append(slot)
                    else:
                        retired.append(slot)
                self._idle[key] = kept
        for slot in retired:
            self._retire(slot)

    def _retire(self, slot: Slot) -> None:
        slot.close_fds()
        if self._executor is not None and not self._closed:
            with contextlib.suppress(RuntimeError):
                self._executor.submit(slot.destroy)
                return
        slot.destroy()

    def flush(self) -> None:
        """Retire every idle slot (the settings or the host changed)."""
        with self._lock:
            slots = [s for q in self._idle.values() for s in q]
            self._idle.clear()
            self._looked.clear()
        for slot in slots:
            self._retire(slot)

    def report(self) -> dict[str, Any]:
        """The pool's state for status: idle and starting slots, hits and misses."""
        return {
            "idle": self.idle(),
            "starting": self.starting(),
            **{k: self.stats[k] for k in ("hits", "misses", "stale", "failed")},
        }

    def idle(self) -> int:
        """Idle slots now, all keys."""
        with self._lock:
            return sum(len(q) for q in self._idle.values())

    def starting(self) -> int:
        """Slots being started now."""
        with self._lock:
            return sum(self._starting.values())

    # -- closing ------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop refilling and destroy every idle slot (processes, cgroups, folders)."""
        self._closed = True
        self._wake()  # refills waiting out their delay end now, starting nothing
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        # A slot still starting is destroyed by its worker (the pool is closed); one
        # that became ready just before is idle and destroyed below: none is lost.
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, executor.shutdown, True)
        await asyncio.to_thread(self.close_now)

    def close_now(self) -> None:
        """Destroy every idle slot now (blocking); for interpreter exit.

        Also called when the backend is dropped, which may happen in one of the pool's
        own workers (the last reference let go there): that one is not waited for.
        """
        self._closed = True
        self._wake()
        worker = threading.current_thread().name.startswith(_WORKER_PREFIX)
        tick, self._tick = self._tick, None
        if tick is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop has no timer to stop
                self._loop.call_soon_threadsafe(tick.cancel)
        with self._lock:
            slots = [s for q in self._idle.values() for s in q]
            self._idle.clear()
        for slot in slots:
            slot.destroy()
        if self._executor is not None:
            self._executor.shutdown(wait=not worker)
            self._executor = None
        # A killed slot's last processes are reaped by init a moment later: until then
        # its cgroup cannot be removed. Wait for that here (a cold run's next run would).
        deadline = time.monotonic() + _READY_WAIT_SEC
        while cgroups.remove_stale() and time.monotonic() < deadline:
            time.sleep(0.02)
        _OPEN.discard(self)
