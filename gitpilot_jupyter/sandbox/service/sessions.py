"""The service's sessions: cells of an approved plan run in their session's kernel.

A part of :class:`~gitpilot_jupyter.sandbox.service.service.SandboxService` (held, not
inherited), over the :class:`~..sessions.SessionManager` the service owns (stopped
with it, so no kernel outlives the server). A cell reaches a kernel only here, with
the spec an approval token stood for (:meth:`SessionDoor.run_cell`); a cell of a
session the caller has not opened starts it with that spec's network, limits and
environment. Every call acts on the caller's own sessions only (the plans' rule).
A cell's ``out/`` files are kept for the caller under the cell's run id, as a run's
(:class:`~.outstore.OutStore`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

from ..backend import OutputCallback
from ..errors import InvalidRequest, SandboxError, SessionNotFound
from ..plans import Approval
from ..policy import SandboxPolicy
from ..request import Caller, RunOptions
from ..results import RunResult, new_run_id
from ..sessions import SessionManager, check_name
from ..spec import RunSpec
from .planner import Planner
from .runs import RunExecutor, run_request
from .workflow import AuditHook

#: The note of a cell its run's Stop interrupted (``DELETE /runs/{run_id}``).
STOPPED_NOTE = "stopped: the cell was interrupted; session {session} keeps its kernel and its state"


class SessionDoor:
    """Start, list, drive and stop the caller's sessions; run their approved cells."""

    def __init__(
        self,
        manager: SessionManager,
        *,
        planner: Planner,
        policy: Callable[[], SandboxPolicy],
        emit: AuditHook,
        runs: RunExecutor,
    ) -> None:
        self.manager = manager
        self.planner = planner
        #: Where a cell under way is registered as a run, so a run's Stop interrupts it.
        self.runs = runs
        self._policy = policy
        self._emit = emit

    async def start(self, name: str, caller: Caller, options: RunOptions) -> dict[str, Any]:
        """Open session ``name`` for ``caller`` with ``options``' network (the settings'
        limits and environment, as a run planned with them would have)."""
        check_name(name)
        spec = self.planner.spec(options.but(language="python", code="pass", session=name))
        return await self._start(spec, caller)

    async def _start(self, spec: RunSpec, caller: Caller) -> dict[str, Any]:
        assert spec.session is not None
        if spec.backend != self.manager.backend.name:
            raise InvalidRequest(
                f"sessions run on the {self.manager.backend.name} backend, not {spec.backend}",
                code="session_unavailable",
            )
        request = run_request(spec, self._policy())
        info = await self.manager.start(spec.session, owner=caller.user, request=request)
        self._emit("session", {"user": caller.user, "action": "start", "name": spec.session})
        return info

    def list(self, caller: Caller) -> list[dict[str, Any]]:
        """The sessions ``caller`` may see, oldest first."""
        return self.manager.list(caller.user)

    async def stop(self, name: str, caller: Caller) -> None:
        """Stop the caller's session ``name``: nothing of it is left."""
        await self.manager.stop(check_name(name), user=caller.user)
        self._emit("session", {"user": caller.user, "action": "stop", "name": name})

    async def restart(self, name: str, caller: Caller) -> dict[str, Any]:
        """Start the caller's session ``name`` afresh (its state is gone)."""
        info = await self.manager.restart(check_name(name), user=caller.user)
        self._emit("session", {"user": caller.user, "action": "restart", "name": name})
        return info

    def interrupt(self, name: str, caller: Caller) -> None:
        """Interrupt the cell under way in the caller's session ``name``."""
        self.manager.interrupt(check_name(name), user=caller.user)
        self._emit("session", {"user": caller.user, "action": "interrupt", "name": name})

    async def run_cell(
        self,
        spec: RunSpec,
        approval: Approval | None,
        caller: Caller,
        *,
        on_output: OutputCallback | None,
        run_id: str | None,
    ) -> RunResult:
        """Run the approved cell ``spec`` in its session (opened first when the caller has
        none of that name); audited as a run. A refusal before the kernel had it gives
        the token back.

        While it runs, the cell is a run under way (``run_id``, made up when None): the
        service's :meth:`~.service.SandboxService.cancel` (``DELETE /runs/{run_id}``)
        interrupts it as :meth:`interrupt` would, and the session keeps its kernel and
        state (its result says so, unless the cell did not stop and the session was lost).
        """
        assert spec.session is not None
        run_id = run_id or new_run_id()
        started = time.monotonic()
        with contextlib.ExitStack() as under_way:
            try:
                # What changed since the plan, checked as for a run: the allow-list, the policy.
                self.planner.resolver.check_allowed(spec.backend)
                command = self.planner.resolver.command(spec.language)
                self._policy().check_destructive(spec.language, spec.code, command)
                if not any(s["name"] == spec.session for s in self.manager.list(caller.user)):
                    await self._start(spec, caller)
                # Under way once its kernel is up: a Stop during the start would come before
                # the kernel could take an interrupt.
                stop = under_way.enter_context(
                    self.runs.tracked(
                        run_id,
                        user=caller.user,
                        backend=spec.backend,
                        session=spec.session,
                        approval=approval,
                    )
                )
            except SandboxError:
                if approval is not None:
                    self.planner.plans.unspend(approval)
                raise
            return await self._run_cell(spec, approval, caller, on_output, run_id, stop, started)

    async def _run_cell(
        self,
        spec: RunSpec,
        approval: Approval | None,
        caller: Caller,
        on_output: OutputCallback | None,
        run_id: str,
        stop: asyncio.Event,
        started: float,
    ) -> RunResult:
        assert spec.session is not None
        plan_id = approval.plan_id if approval is not None else None
        event: dict[str, Any] = {
            "user": caller.user,
            "plan_id": plan_id,
            "digest": spec.digest,
            "language": spec.language,
            "backend": spec.backend,
            "session": spec.session,
        }
        policy = self._policy()
        try:
            outcome = await self.manager.run_cell(
                spec,
                user=caller.user,
                on_output=on_output,
                run_id=run_id,
                plan_id=plan_id,
                stop=stop,
                max_output_bytes=policy.max_output_bytes,
                out_folder=functools.partial(self.runs.out_folder, run_id),
                out_caps=policy.out_caps,
            )
        except SessionNotFound:
            if approval is not None:  # stopped between the start and the cell: nothing ran
                self.planner.plans.unspend(approval)
            raise
        except SandboxError as refusal:
            # Refused before the cell ran (an input changed since its approval, its links
            # failed): the token is unspent, a ``refused`` event as for a run.
            self.runs.refused(refusal, spec, plan_id=plan_id, user=caller.user, approval=approval)
            raise
        except BaseException as exc:
            event.update(
                exit_code=-1,
                duration_ms=int((time.monotonic() - started) * 1000),
                cancelled=isinstance(exc, asyncio.CancelledError),
                error=type(exc).__name__,
            )
            self._emit("run", event)
            raise
        if outcome.out_dir is not None:
            self.runs.out_store.keep(run_id, caller.user, outcome.result.files, outcome.out_dir)
        result = outcome.result
        if outcome.outputs and not result.outputs:
            result = dataclasses.replace(result, outputs=list(outcome.outputs))
        if result.cancelled and not outcome.lost:
            result.notes.append(STOPPED_NOTE.format(session=spec.session))
        event.update(
            run_id=result.run_id,
            exit_code=result.exit_code,
            duration_ms=result.duration_ms,
            timed_out=result.timed_out,
            cancelled=result.cancelled,
            truncated=result.truncated,
            lost=outcome.lost,
        )
        self._emit("run", event)
        return result

    async def aclose(self) -> None:
        """Stop every session (the service is closing)."""
        await self.manager.aclose()
