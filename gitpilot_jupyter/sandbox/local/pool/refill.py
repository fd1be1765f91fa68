"""The pool itself: idle slots per key, handed out, refilled to follow demand, closed."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .. import cgroups
from .config import PoolConfig, PoolKey
from .slot import _READY_WAIT_SEC, Slot

log = logging.getLogger(__name__)

#: How often the refiller looks at its slots without being asked (retire, reap).
_TICK_SEC = 5.0
#: After a slot failed to start, how long none is started (what failed it, a full disk or
#: a broken tool, fails the next one too: asked again at once, the pool would spin).
_RETRY_SEC = _TICK_SEC
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
