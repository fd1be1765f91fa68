"""Running a spec: the audited, stoppable execution and the registry of runs under way.

A part of :class:`~gitpilot_jupyter.sandbox.service.service.SandboxService` (held, not
inherited). :class:`RunExecutor` turns an approved :class:`~.spec.RunSpec` into a
backend request, runs it while :meth:`RunExecutor.cancel` can stop it, and writes
the ``run`` audit event whatever happens once a backend has it (a run refused before
that is a ``refused`` event, its token unspent). While a run of an approved plan is under
way it is linked to that plan in the plan store (:meth:`.plans.PlanStore.running`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from ..backend import OutputCallback, RunRequest, SandboxBackend
from ..errors import EmptyCode, InputRefused, InvalidRequest, RunNotFound, SandboxError
from ..files import path_under_root
from ..inputs import stage_inputs
from ..local.cleanup import make_run_dir, remove_tree
from ..plans import Approval, PlanStore
from ..policy import SandboxPolicy
from ..results import RunResult
from ..settings import SettingsStore
from ..spec import RunSpec
from .capacity import Admission
from .outstore import OutStore
from .resolver import BackendResolver
from .workflow import AuditHook

log = logging.getLogger(__name__)

#: A run id a caller may choose (so it can stop the run before the answer comes back).
RUN_ID_PATTERN = re.compile(r"run_[0-9a-f]{16}")
#: Seconds a stopped backend gets to answer its own envelope (with the output so far)
#: before the service cancels it outright.
STOP_GRACE_SEC = 5.0


def check_run_id(run_id: str | None) -> None:
    """Refuse a caller-chosen run id that is not ``run_`` + 16 hex digits."""
    if run_id is not None and not RUN_ID_PATTERN.fullmatch(str(run_id)):
        raise InvalidRequest("run_id must be 'run_' followed by 16 hex digits")


@dataclass
class ActiveRun:
    """A run under way: who started it, and how to stop it from any thread."""

    run_id: str
    user: str | None
    backend: str
    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event
    started: float
    #: Called on the run's loop when a stop is first asked (the executor's grace period).
    on_stop: Callable[[], None] | None = field(default=None, repr=False)
    #: The session whose kernel runs it, for a session's cell (a stop interrupts the cell).
    session: str | None = None

    def request_stop(self) -> None:
        """Ask the run to stop (thread-safe: the event belongs to the run's loop)."""
        self.loop.call_soon_threadsafe(self._stop)

    def _stop(self) -> None:
        if self.stop.is_set():
            return
        self.stop.set()
        if self.on_stop is not None:
            self.on_stop()


#: The message of the grace's cancel (see :class:`_Grace`).
_GRACE_OVER = "stopped: the backend did not answer within the grace period"


class _Grace:
    """The time a stopped run's backend has to answer before the run is cancelled.

    Armed when a stop is asked, it cancels ``task`` (the one running the backend)
    :data:`STOP_GRACE_SEC` later unless the run is over by then (:meth:`disarm`).
    """

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.expired = False
        self._over = False
        self._timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        if not self._over:
            self._timer = self.task.get_loop().call_later(STOP_GRACE_SEC, self._expire)

    def _expire(self) -> None:
        if not self._over:
            self.expired = True
            self.task.cancel(_GRACE_OVER)

    def disarm(self) -> None:
        self._over = True
        if self._timer is not None:
            self._timer.cancel()

    def withdraw(self, exc: asyncio.CancelledError | None = None) -> bool:
        """Take back the grace's cancel of the task; True when no one else cancelled it
        (``exc``: the cancel being handled, None when the backend answered anyway)."""
        uncancel = getattr(self.task, "uncancel", None)
        if uncancel is not None:  # Python 3.11+: the task counts the cancels asked
            return bool(uncancel() == 0)
        return exc is None or exc.args == (_GRACE_OVER,)


def run_request(spec: RunSpec, policy: SandboxPolicy) -> RunRequest:
    """What a backend is asked to run for ``spec`` under ``policy``."""
    return RunRequest(
        language=spec.language,
        code=spec.code,
        timeout_sec=spec.timeout_sec,
        stdin=spec.stdin,
        allow_network=spec.network,
        env=policy.scrub_env(os.environ, allow_network=spec.network, passthrough=spec.env),
        max_output_bytes=policy.max_output_bytes,
        limits=spec.limits,
        filename=spec.filename,
        out_caps=policy.out_caps,
    )


def _private_folder() -> str:
    """A 0700 folder of the server for one run's input copies (swept as a run folder if
    the server dies); a refusal, never a crash, when the temp dir cannot take one."""
    try:
        return make_run_dir()
    except OSError as exc:
        raise InputRefused(f"cannot stage the inputs: {exc.strerror or exc}") from None


class RunExecutor:
    """Runs specs on their backends, audited and stoppable; knows the runs under way."""

    def __init__(
        self,
        *,
        settings: SettingsStore,
        resolver: BackendResolver,
        policy: Callable[[], SandboxPolicy],
        root_dir: Path | None,
        emit: AuditHook,
        plans: PlanStore | None = None,
        admission: Admission | None = None,
        out_store: OutStore | None = None,
    ) -> None:
        self.settings = settings
        #: Where what runs hand back from ``out/`` is kept for their owners.
        self.out_store = out_store or OutStore()
        #: The caps on runs under way (server-wide, per identity, memory committed).
        self.admission = admission or Admission()
        #: Where a run of an approved plan is linked to its plan while under way.
        self.plans = plans
        self.resolver = resolver
        #: The service's policy, read at each run (it may be replaced).
        self._policy = policy
        self.root_dir = root_dir
        self._emit = emit
        #: Runs under way by run id, so :meth:`cancel` can stop them.
        self._runs: dict[str, ActiveRun] = {}
        self._runs_lock = threading.Lock()

    def prewarm(self, spec: RunSpec) -> bool:
        """Start warm slots for runs like ``spec`` now (before the first one comes);
        False when its backend keeps none."""
        backend = self.resolver.backend(spec.backend)
        prewarm = getattr(backend, "prewarm", None)
        return bool(prewarm(run_request(spec, self._policy()))) if prewarm is not None else False

    async def execute(
        self,
        spec: RunSpec,
        *,
        plan_id: str | None,
        user: str | None,
        on_output: OutputCallback | None,
        run_id: str | None = None,
        approval: Approval | None = None,
        wait: bool = False,
    ) -> RunResult:
        """Run ``spec`` under the policy on its backend; audit the run, whatever happens.

        ``approval`` is the approval the run redeemed: while the run is under way it is
        linked to the approved plan, so Pending Plans can show it and stop it. A run over
        the server's caps raises :class:`~.errors.Busy` before its backend is asked
        (nothing ran, no ``run`` event); ``wait`` waits for a slot instead (a batch item).
        """
        ticket = None
        staging: Path | None = None
        try:
            name, backend, request = await self._admit(spec, plan_id, run_id)
            # Over the server's caps: Busy (429), a refusal like the others.
            ticket = await self.admission.admit(
                user, memory_mb=spec.limits.memory_mb, backend=name, wait=wait
            )
            if spec.inputs:
                # Copied as approved, or refused (approval_mismatch) before anything ran.
                staging = Path(await asyncio.to_thread(_private_folder))
                request.inputs = await asyncio.to_thread(stage_inputs, spec.inputs, staging)
            active, grace = self._reserve(backend, request, user)
        except SandboxError as refusal:
            # Refused before any code reached a backend: nothing ran, the token is unspent.
            if ticket is not None:
                self.admission.release(ticket)
            if staging is not None:
                await asyncio.to_thread(remove_tree, staging)
            self.refused(refusal, spec, plan_id=plan_id, user=user, approval=approval)
            raise
        result: RunResult | None = None
        failure: BaseException | None = None
        started = time.monotonic()
        try:
            if backend.hands_back_files():
                # One mkdir, on the loop: nothing may await between the run's registration
                # and the call that removes it whatever happens.
                request.out_dir = self.out_folder(request.run_id)
            result = await self._run_stoppable(backend, request, on_output, active, grace, approval)
        except BaseException as exc:
            failure = exc
            raise
        finally:
            if request.out_dir is not None:
                files = result.files if result is not None else []
                self.out_store.keep(request.run_id, user, files, request.out_dir)
            self.admission.release(ticket)
            if staging is not None:
                # The run is over: the copies an engine bound (not moved) into it go.
                await asyncio.to_thread(remove_tree, staging)
            # Whatever happened, the run is in the audit log: code was handed to a backend.
            event: dict[str, Any] = {
                "user": user,
                "plan_id": plan_id,
                "digest": spec.digest,
                "language": spec.language,
                "backend": name,
                "run_id": result.run_id if result is not None else request.run_id,
                "exit_code": result.exit_code if result is not None else -1,
                "duration_ms": result.duration_ms
                if result is not None
                else int((time.monotonic() - started) * 1000),
                "timed_out": result.timed_out if result is not None else False,
                # A caller cancelled mid-run (an interrupted cell): the run was stopped.
                "cancelled": result.cancelled
                if result is not None
                else isinstance(failure, asyncio.CancelledError),
                "truncated": result.truncated if result is not None else False,
            }
            if failure is not None:
                event["error"] = type(failure).__name__
            self._emit("run", event)
        return result

    def out_folder(self, run_id: str) -> Path | None:
        """A folder for what the run hands back; None (nothing collected) if none can be made."""
        try:
            return self.out_store.folder(run_id)
        except (OSError, RuntimeError) as exc:
            log.warning("run %s: no folder for its out/ files: %s", run_id, exc)
            return None

    async def _admit(
        self, spec: RunSpec, plan_id: str | None, run_id: str | None
    ) -> tuple[str, SandboxBackend, RunRequest]:
        """The checks a run passes at run time (what changed since its plan): its
        backend's name and object and the request it is sent; a refusal raises."""
        if not isinstance(spec.code, str) or not spec.code.strip():
            raise EmptyCode("there is no code to run")
        if spec.session is not None:
            # A cell of a session goes to its kernel (sessions.SessionManager.run_cell),
            # never into a fresh run that would lose the state it was approved for.
            raise InvalidRequest(
                f"this plan is a cell of session {spec.session!r}: it runs in that session, "
                "not as a run of its own",
                code="session_cell",
            )
        policy = self._policy()
        command = self.resolver.command(spec.language)
        policy.check_destructive(spec.language, spec.code, command)
        name = self.resolver.check_allowed(spec.backend)
        backend = self.resolver.backend(name)
        refused = backend.refusal(allow_network=spec.network)
        if refused is not None:
            raise refused  # what changed since the plan: the host can no longer contain it
        file_path = None
        if spec.file is not None:
            # A file run: the backend may send the file's folder along (matrixlab does).
            root = self.root_dir or Path.cwd().resolve()
            file_path = await asyncio.to_thread(path_under_root, root, spec.file)
        request = run_request(spec, policy)
        request.plan_id, request.file = plan_id, file_path
        if run_id:
            request.run_id = run_id  # else the fresh one the request was made with
        return name, backend, request

    def _reserve(
        self, backend: SandboxBackend, request: RunRequest, user: str | None
    ) -> tuple[ActiveRun, _Grace]:
        """Register the run under its id (refused when one with that id is under way),
        with the grace a stop gives its backend."""
        runner = asyncio.current_task()
        assert runner is not None, "a run is awaited in a task"
        grace = _Grace(runner)
        stop = asyncio.Event()
        request.stop = stop
        active = ActiveRun(
            run_id=request.run_id,
            user=user,
            backend=backend.name,
            loop=asyncio.get_running_loop(),
            stop=stop,
            started=time.monotonic(),
            on_stop=grace.arm,
        )
        self._register(active)
        return active, grace

    def _register(self, active: ActiveRun) -> None:
        with self._runs_lock:
            if active.run_id in self._runs:
                raise InvalidRequest(
                    f"a run with id {active.run_id} is already under way", code="run_id_in_use"
                )
            self._runs[active.run_id] = active

    @contextlib.contextmanager
    def tracked(
        self,
        run_id: str,
        *,
        user: str | None,
        backend: str,
        session: str,
        approval: Approval | None = None,
    ) -> Iterator[asyncio.Event]:
        """Register a session's cell as a run under way while the block runs: the event
        it yields is set by :meth:`cancel`, and the cell's kernel interrupts the cell on
        it (the session's own grace, not :data:`STOP_GRACE_SEC`: the session lives on).

        Linked to its approved plan meanwhile, as :meth:`execute`'s runs are; a run id
        already under way is refused (``run_id_in_use``) before the block runs.
        """
        stop = asyncio.Event()
        active = ActiveRun(
            run_id=run_id,
            user=user,
            backend=backend,
            loop=asyncio.get_running_loop(),
            stop=stop,
            started=time.monotonic(),
            session=session,
        )
        self._register(active)
        store = self.plans if approval is not None else None
        try:
            if store is not None and approval is not None:
                store.run_started(approval.plan, run_id, approved_by=approval.approved_by)
            yield stop
        finally:
            with self._runs_lock:
                self._runs.pop(run_id, None)
            if store is not None:
                store.run_ended(run_id)

    def refused(
        self,
        refusal: SandboxError,
        spec: RunSpec,
        *,
        plan_id: str | None,
        user: str | None,
        approval: Approval | None,
    ) -> None:
        """A run refused before it started: its token back, a ``refused`` event."""
        if approval is not None and self.plans is not None:
            self.plans.unspend(approval)
        self._emit(
            "refused",
            {
                "user": user,
                "plan_id": plan_id,
                "digest": spec.digest,
                "language": spec.language,
                "backend": spec.backend,
                "code": refusal.code,
                "error": type(refusal).__name__,
            },
        )

    async def _run_stoppable(
        self,
        backend: SandboxBackend,
        request: RunRequest,
        on_output: OutputCallback | None,
        active: ActiveRun,
        grace: _Grace,
        approval: Approval | None = None,
    ) -> RunResult:
        """Run ``request`` on ``backend`` while it can be stopped by :meth:`cancel`.

        The backend runs in the caller's task (no task of its own: that cost a warm run
        two turns of the event loop). A stop sets ``request.stop``: a backend that
        honours it answers with its output so far; one that has not answered
        :data:`STOP_GRACE_SEC` later is cancelled and the run answered as stopped.
        """
        # A run of an approved plan is linked to it while under way (Pending Plans' Stop).
        store = self.plans if approval is not None else None
        try:
            if store is not None and approval is not None:
                store.run_started(approval.plan, request.run_id, approved_by=approval.approved_by)
            try:
                result = await backend.run(request, on_output)
            except asyncio.CancelledError as exc:
                # The caller's own cancel (an interrupted cell) goes on; the backend's
                # clean-up has killed the process tree. The grace's cancel ends here.
                if not grace.expired or not grace.withdraw(exc):
                    raise
            else:
                if not grace.expired:
                    return result
                grace.withdraw()  # the backend answered through the grace's cancel
            # The backend's own fields, as its envelope would have them (matrixlab's command
            # and notes differ from the local ones).
            named = request.named_after
            file = PurePath(named).name if named is not None else None
            return RunResult(
                backend=backend.name,
                language=request.language,
                command=backend.display_command(request.language, file)
                or self.resolver.command(request.language),
                exit_code=-1,
                cancelled=True,
                duration_ms=int((time.monotonic() - active.started) * 1000),
                run_id=request.run_id,
                plan_id=request.plan_id,
                isolation=backend.isolation(),
                notes=backend.limit_notes(request.limits),
            )
        finally:
            grace.disarm()
            with self._runs_lock:
                self._runs.pop(request.run_id, None)
            if store is not None:
                store.run_ended(request.run_id)

    def cancel(self, run_id: str, *, user: str | None = None) -> dict[str, Any]:
        """Stop a run under way (see :meth:`.service.SandboxService.cancel`)."""
        with self._runs_lock:
            active = self._runs.get(str(run_id))
        if active is None or (active.user is not None and user is not None and active.user != user):
            raise RunNotFound(f"no run {run_id!r} is under way (unknown, or already over)")
        active.request_stop()
        if self.plans is not None:
            self.plans.run_stopping(active.run_id)
        self._emit("cancel", {"user": user, "run_id": active.run_id, "backend": active.backend})
        answer: dict[str, Any] = {"run_id": active.run_id, "cancelled": True}
        if active.session is not None:  # the cell is interrupted; its session stays
            answer["session"] = active.session
        return answer

    def active_runs(self) -> list[str]:
        """The ids of the runs under way, oldest first."""
        with self._runs_lock:
            return list(self._runs)
