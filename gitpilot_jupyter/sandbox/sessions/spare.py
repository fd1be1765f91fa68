"""One kernel started ahead of the next session, as the warm pool starts runs ahead.

A session's start is mostly the kernel's own (the interpreter and ipykernel's imports,
about a second on a busy machine). The manager keeps one kernel started ahead for
the request the last session was started with (network, limits, environment) and
hands it to the next start with that request: it has its own key, made when it
started, and no owner nor name until then; nothing reaches it meanwhile. It follows
the warm pool's rules: none when the pool is off, retired after the pool's
``idle_sec`` unused, and compared at hand-out with what a launch is made of now
(the isolator's fingerprint: hidden paths, the bwrap view), else started again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..backend import RunRequest
from .kernel import BOOT_FILE, KernelSession

if TYPE_CHECKING:
    from ..local.backends import SubprocessSandbox

log = logging.getLogger(__name__)


def request_key(request: RunRequest) -> Hashable:
    """What of a start request a kernel started ahead must have been started with."""
    return (request.allow_network, request.limits, tuple(sorted(request.env.items())))


@dataclass
class _Ahead:
    key: Hashable
    fingerprint: Hashable
    task: asyncio.Task[KernelSession]
    retire: asyncio.TimerHandle | None = None


class Spare:
    """At most one kernel started ahead, for the last start's request."""

    def __init__(self, backend: SubprocessSandbox) -> None:
        self.backend = backend
        self._ahead: _Ahead | None = None
        self._retiring: set[asyncio.Task[None]] = set()

    def _fingerprint(self, request: RunRequest) -> Hashable:
        interpreter = self.backend.interpreters.resolve("python") or "python"
        return self.backend.isolator.fingerprint(
            [interpreter, BOOT_FILE], allow_network=request.allow_network
        )

    def enabled(self) -> bool:
        """False when the backend's pool is off: nothing is started ahead then."""
        return self.backend.pool_config.enabled

    async def take(self, request: RunRequest) -> KernelSession | None:
        """The kernel started ahead for ``request``, once it is up; None when there is none
        (or it is for another request, or the host's view changed, or it failed)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        if ahead.retire is not None:
            ahead.retire.cancel()
        if ahead.key != request_key(request) or ahead.fingerprint != self._fingerprint(request):
            self._retire(ahead)
            return None
        try:
            kernel = await asyncio.shield(ahead.task)
        except asyncio.CancelledError:
            self._retire(ahead)
            raise
        except Exception:
            log.warning("a session kernel started ahead failed", exc_info=True)
            return None
        if not kernel.alive():
            self._retire(ahead)
            return None
        return kernel

    def refill(self, request: RunRequest) -> None:
        """Start a kernel ahead for the next start like ``request`` (if none is)."""
        if self._ahead is not None or not self.enabled():
            return
        task = asyncio.ensure_future(KernelSession.start(self.backend, "", request))
        ahead = _Ahead(request_key(request), self._fingerprint(request), task)
        self._ahead = ahead

        def started(_: object) -> None:
            if self._ahead is ahead:
                loop = asyncio.get_running_loop()
                ahead.retire = loop.call_later(self.backend.pool_config.idle_sec, self._idle, ahead)

        task.add_done_callback(started)

    def _idle(self, ahead: _Ahead) -> None:
        if self._ahead is ahead:
            self._ahead = None
            self._retire(ahead)

    def _retire(self, ahead: _Ahead) -> None:
        task = asyncio.ensure_future(_stop(ahead))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def aclose(self) -> None:
        """Stop the kernel started ahead (and any being retired): nothing of them is left."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            if ahead.retire is not None:
                ahead.retire.cancel()
            await _stop(ahead)
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)


async def _stop(ahead: _Ahead) -> None:
    """Stop a kernel started ahead, once its start is over (not cancelled midway: its
    folder and cgroup are made in a worker thread, which a cancel would not stop)."""
    try:
        kernel = await asyncio.shield(ahead.task)
    except Exception:
        return  # it failed: its start removed what it had made
    await kernel.stop()
