"""The sessions of a server: started, found by owner and name, run cell by cell, stopped.

A session belongs to the identity that started it, under the plans' rule
(:func:`~..plans.belongs_to`): someone else's session is answered as an unknown one.
The only way a cell's code reaches a kernel is :meth:`SessionManager.run_cell`, which
takes the approved :class:`~..spec.RunSpec` itself: its digest binds the session's name
and the cell's code, so a token approved for one cell in one session runs that cell
there and nowhere else. A session that waits longer than its idle time without a
cell is stopped; stopping removes every process, the cgroup and the folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backend import OutputCallback, RunRequest
from ..errors import InvalidRequest, SessionExists, SessionNotFound
from ..outfiles import OutCaps
from ..output import DEFAULT_OUTPUT_CAP
from ..plans import belongs_to
from ..settings import DEFAULT_SESSION_IDLE_MIN
from ..spec import RunSpec
from .boot import engine_refusal
from .kernel import CellOutcome, KernelSession, OutFolder
from .spare import Spare

if TYPE_CHECKING:
    from ..local.backends import SubprocessSandbox

log = logging.getLogger(__name__)

#: A session's name: what ``%%sandbox --session NAME`` and the REST paths carry.
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: object) -> str:
    """``name`` when it is a session's name; else :class:`InvalidRequest`."""
    if not isinstance(name, str) or not SESSION_NAME.fullmatch(name):
        raise InvalidRequest(
            "a session's name is 1 to 64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit",
            code="invalid_session",
        )
    return name


@dataclass
class _Entry:
    name: str
    owner: str | None
    kernel: KernelSession
    started_at: float
    last_used: float
    cells: int = 0
    idle_timer: asyncio.TimerHandle | None = None

    def info(self) -> dict[str, Any]:
        request = self.kernel.request
        return {
            "name": self.name,
            "owner": self.owner,
            "state": "busy" if self.kernel.busy else "idle",
            "started_at": self.started_at,
            "last_used": self.last_used,
            "cells": self.cells,
            "network": request.allow_network,
            "memory_mb": request.limits.memory_mb,
            "isolation": list(self.kernel.process.layers),
        }


class SessionManager:
    """The sessions started on ``backend`` (the subprocess backend), by owner and name.

    ``idle_sec`` is read each time a session's idle timer is set (the settings'
    ``session_idle_min``, which may change). Unless the backend's pool is off, one
    kernel is started ahead for the next start (:mod:`.spare`).
    """

    def __init__(
        self,
        backend: SubprocessSandbox,
        *,
        idle_sec: Callable[[], float] = lambda: DEFAULT_SESSION_IDLE_MIN * 60,
    ) -> None:
        self.backend = backend
        self.idle_sec = idle_sec
        self._sessions: dict[tuple[str | None, str], _Entry] = {}
        self._stopping: set[asyncio.Task[None]] = set()
        #: The kernel started ahead of the next start (:mod:`.spare`).
        self.spare = Spare(backend)

    # -- finding ---------------------------------------------------------------------

    def _find(self, name: str, user: str | None) -> _Entry:
        exact = self._sessions.get((user, name))
        if exact is not None:
            return exact
        for (owner, found), entry in self._sessions.items():
            if found == name and belongs_to(owner, user):
                return entry
        raise SessionNotFound(f"no session {name!r} (unknown, stopped or lost)")

    def list(self, user: str | None = None) -> list[dict[str, Any]]:
        """The sessions ``user`` may see, oldest first."""
        entries = [e for (o, _), e in self._sessions.items() if belongs_to(o, user)]
        return [e.info() for e in sorted(entries, key=lambda e: e.started_at)]

    # -- life ------------------------------------------------------------------------

    async def start(self, name: str, *, owner: str | None, request: RunRequest) -> dict[str, Any]:
        """Start session ``name`` for ``owner``: a kernel in a run made from ``request``
        (its network, resource limits and environment; its code is the kernel's)."""
        check_name(name)
        if (owner, name) in self._sessions:
            raise SessionExists(f"session {name!r} is already open: restart or stop it")
        refused = engine_refusal(self.backend.isolator.engine)
        if refused is not None:
            raise refused
        kernel = await self.spare.take(request)
        if kernel is None:
            kernel = await KernelSession.start(self.backend, name, request)
        kernel.name = name
        self.spare.refill(request)
        if (owner, name) in self._sessions:  # started twice at once: the first one stays
            await kernel.stop()
            raise SessionExists(f"session {name!r} is already open: restart or stop it")
        now = time.time()
        entry = _Entry(name, owner, kernel, started_at=now, last_used=now)
        self._sessions[(owner, name)] = entry
        self._arm_idle(entry)
        return entry.info()

    async def stop(self, name: str, *, user: str | None) -> None:
        """Stop ``user``'s session ``name``: nothing of it is left after."""
        await self._end(self._find(name, user))

    async def restart(self, name: str, *, user: str | None) -> dict[str, Any]:
        """Stop the session and start it again with the same name, owner and request."""
        entry = self._find(name, user)
        request = entry.kernel.request
        await self._end(entry)
        return await self.start(name, owner=entry.owner, request=request)

    def interrupt(self, name: str, *, user: str | None) -> None:
        """Interrupt the cell under way in ``user``'s session ``name`` (it keeps its state)."""
        self._find(name, user).kernel.interrupt()

    async def aclose(self) -> None:
        """Stop every session and the kernel started ahead (the server is closing)."""
        await asyncio.gather(*(self._end(e) for e in list(self._sessions.values())))
        await self.spare.aclose()
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)

    async def _end(self, entry: _Entry) -> None:
        if self._sessions.get((entry.owner, entry.name)) is entry:
            del self._sessions[(entry.owner, entry.name)]
        if entry.idle_timer is not None:
            entry.idle_timer.cancel()
        await entry.kernel.stop()

    def _arm_idle(self, entry: _Entry) -> None:
        if entry.idle_timer is not None:
            entry.idle_timer.cancel()
        loop = asyncio.get_running_loop()
        entry.idle_timer = loop.call_later(self.idle_sec(), self._idle_over, entry)

    def _idle_over(self, entry: _Entry) -> None:
        if entry.kernel.busy:
            return  # a cell under way sets the timer again when it ends
        log.info("session %s: idle for %.0f s, stopped", entry.name, self.idle_sec())
        task = asyncio.ensure_future(self._end(entry))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    # -- cells -----------------------------------------------------------------------

    async def run_cell(
        self,
        spec: RunSpec,
        *,
        user: str | None,
        on_output: OutputCallback | None = None,
        run_id: str | None = None,
        plan_id: str | None = None,
        stop: asyncio.Event | None = None,
        max_output_bytes: int = DEFAULT_OUTPUT_CAP,
        out_folder: OutFolder | None = None,
        out_caps: OutCaps | None = None,
    ) -> CellOutcome:
        """Run the approved cell ``spec`` in its session (``spec.session``), as ``user``.

        The service calls it with the spec an approval token stood for; nothing else
        sends code to a kernel. The spec must agree with the session it names: python,
        this backend, and the network the session was started with. Its inputs are
        handed to the cell as approved (:mod:`.files`); what the cell wrote or changed
        under ``out/`` is copied within ``out_caps`` into the folder ``out_folder`` makes
        (:meth:`.kernel.KernelSession.run_cell`).
        """
        if spec.session is None:
            raise InvalidRequest("this plan is not a session's cell", code="invalid_session")
        entry = self._find(spec.session, user)
        kernel = entry.kernel
        if spec.language != "python":
            raise InvalidRequest(f"a session runs python cells, not {spec.language}")
        if spec.backend != self.backend.name:
            raise InvalidRequest(f"session {entry.name!r} runs on {self.backend.name}")
        if spec.network != kernel.request.allow_network:
            state = "on" if kernel.request.allow_network else "off"
            raise InvalidRequest(
                f"session {entry.name!r} was started with network {state}: a cell planned "
                "otherwise does not run in it (restart it with the network it needs)",
                code="session_network",
            )
        if spec.stdin is not None:
            raise InvalidRequest("a session's cell reads no stdin", code="invalid_session")
        if entry.idle_timer is not None:
            entry.idle_timer.cancel()
        entry.cells += 1
        try:
            outcome = await kernel.run_cell(
                spec.code,
                timeout_sec=spec.timeout_sec,
                max_output_bytes=max_output_bytes,
                on_output=on_output,
                stop=stop,
                run_id=run_id,
                plan_id=plan_id,
                inputs=spec.inputs,
                out_folder=out_folder,
                out_caps=out_caps,
            )
        finally:
            entry.last_used = time.time()
            if not kernel.alive():
                with contextlib.suppress(Exception):
                    await self._end(entry)
            elif self._sessions.get((entry.owner, entry.name)) is entry:
                self._arm_idle(entry)
        return dataclasses.replace(outcome, lost=outcome.lost or not kernel.alive())
