"""Admission: how many runs may be under way at once, and how much memory they commit.

A part of :class:`~gitpilot_jupyter.sandbox.service.runs.RunExecutor`: every run of
every face (REST run, plan-and-run, batch items, agent runs, a kernel's in-process
runs) passes :meth:`Admission.admit` just before its backend starts, and holds its
:class:`Ticket` until the run is over. Three caps, all the administrator's
(:class:`CapacityLimits`):

* runs under way on the server (``max_runs``, default four per usable core, at least 16);
* runs under way per identity (``max_runs_per_user``, default half of ``max_runs``);
  the one shared principal of a single-user server (``user`` None) has the server's;
* memory committed: the sum of the memory limits of the runs under way on this host
  (``subprocess`` and ``off``; a MatrixLab run commits its Runner's memory, not this
  host's) against ``memory_budget_mb`` (default: what the host or the server's cgroup
  has, less a reserve for the server itself).

A run over a cap is refused at once with :class:`~.errors.Busy` (429 and a retry
hint) rather than queued: a queued request holds a connection and its caller's
patience without saying why, and a refusal tells the caller when to try again. A
batch item is the exception (:meth:`Admission.admit` with ``wait=True``): the batch
was approved as a whole, so its items wait for a slot instead of failing.
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Busy, InvalidSetting
from ..records import CapacityReport

#: Runs under way per usable core by default (most snippets wait on something), and at least.
RUNS_PER_CORE = 4
MIN_RUNS = 16
#: Memory kept for the server itself when the budget comes from the host's: the larger.
RESERVE_MB = 1024
RESERVE_FRACTION = 0.125
#: The hint a refused caller gets: when to try again, in seconds.
RETRY_AFTER_SEC = 2
#: Backends whose runs commit this host's memory.
LOCAL_BACKENDS = frozenset({"subprocess", "off"})

_MEMINFO = Path("/proc/meminfo")
_CGROUP_MEMORY_MAX = (
    Path("/sys/fs/cgroup/memory.max"),  # cgroup v2
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),  # cgroup v1
)


def usable_cores() -> int:
    """The cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def host_memory_mb() -> int | None:
    """What this host has (MemTotal), or the server's cgroup limit when smaller; None unknown."""
    total: int | None = None
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemTotal:"):
                total = int(line.split()[1]) // 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    for path in _CGROUP_MEMORY_MAX:
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        if raw.isdigit():
            limit = int(raw) // (1024 * 1024)
            total = limit if total is None else min(total, limit)
        break
    return total


def default_memory_budget_mb() -> int | None:
    """The host's memory less the server's reserve; None when the host does not say."""
    total = host_memory_mb()
    if total is None:
        return None
    reserve = max(RESERVE_MB, int(total * RESERVE_FRACTION))
    return max(total - reserve, total // 2)


@dataclass(frozen=True)
class CapacityLimits:
    """The caps of :class:`Admission` (0 for a memory budget: no memory cap)."""

    max_runs: int = field(default_factory=lambda: max(MIN_RUNS, RUNS_PER_CORE * usable_cores()))
    #: None: half of ``max_runs`` (at least one).
    max_runs_per_user: int | None = None
    #: MiB; None: the host's (:func:`default_memory_budget_mb`); 0: no memory cap.
    memory_budget_mb: int | None = None
    #: The most items of a batch at a time (``workers``); None: ``max_runs``.
    max_batch_workers: int | None = None

    def __post_init__(self) -> None:
        if self.max_runs < 1:
            raise InvalidSetting("max_concurrent_runs must be at least 1")
        if self.max_runs_per_user is not None and self.max_runs_per_user < 1:
            raise InvalidSetting("max_runs_per_user must be at least 1")
        if self.max_batch_workers is not None and self.max_batch_workers < 1:
            raise InvalidSetting("max_batch_workers must be at least 1")
        if self.memory_budget_mb is not None and self.memory_budget_mb < 0:
            raise InvalidSetting("memory_budget_mb must be 0 (no cap) or more")

    @property
    def per_user(self) -> int:
        """The cap of one identity's runs under way."""
        if self.max_runs_per_user is not None:
            return min(self.max_runs_per_user, self.max_runs)
        return max(1, self.max_runs // 2)

    @property
    def batch_workers(self) -> int:
        """The most items of one batch at a time: more asked are clamped to it."""
        return self.max_batch_workers if self.max_batch_workers is not None else self.max_runs

    @property
    def budget_mb(self) -> int | None:
        """The memory the runs under way may commit, in MiB; None: no cap."""
        if self.memory_budget_mb == 0:
            return None
        if self.memory_budget_mb is not None:
            return self.memory_budget_mb
        return default_memory_budget_mb()


def capacity_limits(
    max_runs: int | None = None,
    max_runs_per_user: int | None = None,
    memory_budget_mb: int | None = None,
    max_batch_workers: int | None = None,
) -> CapacityLimits:
    """The limits an administrator gave (None: the default of each)."""
    return CapacityLimits(
        max_runs=max_runs if max_runs is not None else CapacityLimits().max_runs,
        max_runs_per_user=max_runs_per_user,
        memory_budget_mb=memory_budget_mb,
        max_batch_workers=max_batch_workers,
    )


@dataclass
class Ticket:
    """One admitted run: what it holds until :meth:`Admission.release`."""

    user: str | None
    memory_mb: int


class Admission:
    """The runs under way and what they commit; admits a run or refuses it (:class:`Busy`).

    Thread-safe: a kernel's in-process runs and a server's share nothing else, but
    runs may come from several event loops of one process.
    """

    def __init__(self, limits: CapacityLimits | None = None) -> None:
        self.limits = limits or CapacityLimits()
        self._budget_mb = self.limits.budget_mb
        self._lock = threading.Lock()
        self._running = 0
        self._per_user: dict[str | None, int] = {}
        self._memory_mb = 0
        self._refused = 0
        #: Batch items waiting for a slot: woken (on their own loop) when a run ends.
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    def _refusal(self, user: str | None, memory_mb: int) -> str | None:
        # Called with the lock held: why a run of ``user`` committing ``memory_mb`` may not start.
        limits = self.limits
        if self._running >= limits.max_runs:
            return f"the server runs {self._running} runs already (its cap: {limits.max_runs})"
        if user is not None and self._per_user.get(user, 0) >= limits.per_user:
            return f"you have {limits.per_user} runs under way already (the cap per user)"
        budget = self._budget_mb
        # A run is admitted when no other commits memory, whatever its own limit; one
        # that commits none of this host's memory (MatrixLab) never passes the budget.
        over = budget is not None and self._memory_mb + memory_mb > budget
        if over and self._memory_mb and memory_mb:
            return (
                f"the runs under way commit {self._memory_mb} MiB of memory; this run's "
                f"{memory_mb} MiB would pass the server's budget of {budget} MiB"
            )
        return None

    def _take(self, user: str | None, memory_mb: int) -> Ticket:
        self._running += 1
        self._per_user[user] = self._per_user.get(user, 0) + 1
        self._memory_mb += memory_mb
        return Ticket(user, memory_mb)

    async def admit(
        self, user: str | None, *, memory_mb: int, backend: str, wait: bool = False
    ) -> Ticket:
        """A ticket for one run, or :class:`Busy`; ``wait`` waits for a slot instead."""
        committed = memory_mb if backend in LOCAL_BACKENDS else 0
        while True:
            with self._lock:
                why = self._refusal(user, committed)
                if why is None:
                    return self._take(user, committed)
                if not wait:
                    self._refused += 1
                    raise Busy(
                        f"busy: {why}; try again in {RETRY_AFTER_SEC} s",
                        retry_after=RETRY_AFTER_SEC,
                    )
                loop = asyncio.get_running_loop()
                woken: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, woken))
            try:
                await woken
            finally:
                with self._lock:
                    if (loop, woken) in self._waiters:
                        self._waiters.remove((loop, woken))

    def release(self, ticket: Ticket) -> None:
        """The run of ``ticket`` is over: its slot and memory are free (wakes the waiters)."""
        with self._lock:
            self._running -= 1
            left = self._per_user.get(ticket.user, 1) - 1
            if left > 0:
                self._per_user[ticket.user] = left
            else:
                self._per_user.pop(ticket.user, None)
            self._memory_mb -= ticket.memory_mb
            waiters, self._waiters = self._waiters, []
        for loop, woken in waiters:
            loop.call_soon_threadsafe(_wake, woken)

    def report(self) -> CapacityReport:
        """The load as the status shows it."""
        with self._lock:
            return {
                "runs": self._running,
                "max_runs": self.limits.max_runs,
                "max_runs_per_user": self.limits.per_user,
                "memory_committed_mb": self._memory_mb,
                "memory_budget_mb": self._budget_mb,
                "waiting": len(self._waiters),
                "refused": self._refused,
            }


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
