"""How many runs this server sends a Runner at once; the rest wait their turn here.

A Runner given many runs at once starts their containers ever more slowly (the start
counts in its timeout) and queues requests past its workers (which our HTTP wait
does not see), so runs "time out" with no output or look unreachable while they run
anyway. So each Runner (by URL) gets at most :func:`max_runs` runs of this process at
once, first come first served; the queue's time is not the snippet's. A queue longer
than :data:`MAX_QUEUED_RUNS` is refused as busy (429, nothing sent). Slots are
thread-safe and serve any event loop (the server's, the CLI's, a batch's).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Mapping
from typing import Any, ClassVar

from ..errors import BackendBusy, InvalidSetting

#: The environment variable that sets how many runs a Runner gets at once from this server.
MAX_RUNS_ENV = "GITPILOT_MATRIXLAB_MAX_RUNS"
#: Runs at once per Runner: container starts stay well inside the 3 s allowance at 4 on
#: the stand-in's measured slowdown (see docs/admin/matrixlab.md, "Load").
DEFAULT_MAX_RUNS = 4
#: Runs that may wait for a Runner; one more is refused as busy.
MAX_QUEUED_RUNS = 256
#: The retry hint of a busy answer, in seconds.
BUSY_RETRY_SEC = 10


def max_runs(environ: Mapping[str, str]) -> int:
    """The runs a Runner gets at once: ``GITPILOT_MATRIXLAB_MAX_RUNS`` (1..64), else 4."""
    raw = environ.get(MAX_RUNS_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_RUNS
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise InvalidSetting(f"{MAX_RUNS_ENV} must be a number from 1 to 64, got {raw!r}")
    return int(raw)


_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


class RunnerSlots:
    """At most ``limit`` runs at once on one Runner, the others in order of arrival."""

    _by_url: ClassVar[dict[str, RunnerSlots]] = {}
    _registry_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.active = 0
        self._waiters: deque[_Waiter] = deque()
        self._lock = threading.Lock()

    @classmethod
    def for_runner(cls, url: str, limit: int) -> RunnerSlots:
        """The slots of the Runner at ``url`` (one object per URL in this process)."""
        with cls._registry_lock:
            slots = cls._by_url.get(url)
            if slots is None:
                slots = cls._by_url[url] = cls(limit)
            slots.limit = limit
            return slots

    @property
    def waiting(self) -> int:
        """Runs waiting for a slot now."""
        return len(self._waiters)

    async def acquire(self, stop: asyncio.Event | None = None) -> bool:
        """Wait for a slot: True once held, False when ``stop`` was set first."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.active < self.limit and not self._waiters:
                self.active += 1
                return True
            if len(self._waiters) >= MAX_QUEUED_RUNS:
                raise BackendBusy(
                    f"the MatrixLab Runner has {len(self._waiters)} runs of this server "
                    f"waiting for it already: retry in {BUSY_RETRY_SEC} s",
                    retry_after=BUSY_RETRY_SEC,
                )
            waiter: _Waiter = (loop, loop.create_future())
            self._waiters.append(waiter)
        granted = waiter[1]
        waits: set[asyncio.Future[Any]] = {granted}
        stopped = asyncio.ensure_future(stop.wait()) if stop is not None else None
        if stopped is not None:
            waits.add(stopped)
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            self._leave(waiter)
            raise
        finally:
            if stopped is not None:
                stopped.cancel()
        if granted.done():
            return True
        self._leave(waiter)
        return False

    def _leave(self, waiter: _Waiter) -> None:
        """A waiter gives up; a slot handed to it meanwhile goes to the next one."""
        with self._lock:
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                return
        self.release()

    def release(self) -> None:
        """Give a slot back: to the first waiter, else free."""
        with self._lock:
            while self._waiters:
                loop, granted = self._waiters.popleft()
                with contextlib.suppress(RuntimeError):  # its loop is closed: the next one
                    loop.call_soon_threadsafe(_grant, granted)
                    return
            self.active -= 1


def _grant(granted: asyncio.Future[None]) -> None:
    if not granted.done():
        granted.set_result(None)
