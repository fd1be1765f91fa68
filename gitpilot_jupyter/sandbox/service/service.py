"""SandboxService: the one door every face calls.

plan -> approve -> run (or run an approved plan by its token alone), pending,
reject, the agents' plan / claim, status and configure. Each call emits its audit
event; no face touches the plan or claim stores nor the parts below (a test of the
layering keeps it so). A run is defined once, by :meth:`.planner.Planner.spec`
(see :mod:`gitpilot_jupyter.sandbox.spec`).

The service is the door, not the whole house: it holds its parts (composition,
no mixins) and keeps here what the door itself decides.

* :class:`~.resolver.BackendResolver`: which backend a call runs on, the allow-list.
* :class:`~.planner.Planner`: the run spec and the plan describing it.
* :class:`~.workflow.PlanWorkflow`: plans kept with their owner, approve, reject,
  the agents' tickets and claims (the only user of the plan and claim stores).
* :class:`~.runs.RunExecutor`: the audited, stoppable execution and the runs under way.
* :class:`~.status.StatusReporter`: the typed status.
* :class:`~.matrixlab.ops.MatrixLabOperations` (``service.matrixlab``): Test connection
  and the Runner lifecycle, audited there; faces call it as it is.
* :class:`~.sessions.SessionDoor` (``service.sessions``): the caller's sessions (start,
  list, interrupt, restart, stop), which faces call as they are too; a session's cell is
  planned and run by its token as any run (:meth:`SandboxService.run` sends it there).

What the door decides: the caller's rights (an agent's source, the approval
switch, a plan's own approver in :meth:`SandboxService.plan_and_run`), the order of
a run's checks (:meth:`SandboxService.run`), which settings may be saved
(:meth:`SandboxService.configure`). A few methods hand their call to one part and
stay all the same: :meth:`~SandboxService.pending`, :meth:`~SandboxService.running`,
:meth:`~SandboxService.approve`, :meth:`~SandboxService.reject`,
:meth:`~SandboxService.claim`, :meth:`~SandboxService.cancel` and
:meth:`~SandboxService.run_file` take the
:class:`~gitpilot_jupyter.sandbox.request.Caller` of a face, which no face may take to
the workflow or the executor itself; :meth:`~SandboxService.status` is the answer
a face renders (and :meth:`~SandboxService.configure` returns);
:meth:`~SandboxService.aclose` ends the door's life. The core's own callers (a batch,
a Dask worker, diagnostics) use the parts directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..backend import OutputCallback
from ..claims import AgentPlan, ClaimAnswer
from ..errors import InvalidRequest, PlanBlocked, SandboxError
from ..inputs import RunInput
from ..languages import Interpreters
from ..local.isolation import Isolator
from ..local.off import check_off_confirmed
from ..local.pool import PoolConfig
from ..matrixlab.config import LifecycleConfig
from ..matrixlab.ops import MatrixLabOperations
from ..plans import AGENT_SOURCE, Approval, ExecutionPlan, PlannedRun, PlanStore, RunUnderWay
from ..policy import SandboxPolicy
from ..records import Status
from ..report import blocked_message
from ..request import Caller, RunOptions
from ..results import RunResult
from ..sessions import SessionManager
from ..settings import SettingsStore, check_backend, env_flag
from ..spec import RunSpec
from ..text import check_text
from .authority import SettingsAuthority
from .capacity import Admission, CapacityLimits
from .planner import MAX_CODE_CHARS, Planner
from .resolver import BackendResolver
from .runs import RUN_ID_PATTERN, STOP_GRACE_SEC, ActiveRun, RunExecutor, check_run_id
from .sessions import SessionDoor
from .status import StatusReporter
from .workflow import AuditHook, PlanWorkflow

__all__ = [
    "MAX_CODE_CHARS",
    "REQUIRE_APPROVAL_ENV",
    "RUN_ID_PATTERN",
    "STOP_GRACE_SEC",
    "ActiveRun",
    "AuditHook",
    "SandboxService",
    "approval_required_by_env",
    "check_run_id",
]

REQUIRE_APPROVAL_ENV = "GITPILOT_SANDBOX_REQUIRE_APPROVAL"

#: The caller of an in-process face: a shared principal, no session.
_ANYONE = Caller()
#: What a long-form run that cannot match any plan is checked against.
_NO_DIGEST = "sha256:none"


def approval_required_by_env(environ: Mapping[str, str]) -> bool:
    """False only when ``GITPILOT_SANDBOX_REQUIRE_APPROVAL`` is set to a false value."""
    return env_flag(environ, REQUIRE_APPROVAL_ENV, default=True)


class SandboxService:
    """Plans, approves and runs snippets under one policy, on the resolved backend.

    The service is pure Python and async; faces (REST, magic, CLI, lab) only
    translate their input into these calls and the typed errors into theirs.
    """

    def __init__(
        self,
        *,
        settings: SettingsStore | None = None,
        policy: SandboxPolicy | None = None,
        plans: PlanStore | None = None,
        interpreters: Interpreters | None = None,
        isolator: Isolator | None = None,
        require_approval: bool | None = None,
        allowed_backends: Iterable[str] | None = None,
        root_dir: str | Path | None = None,
        audit: AuditHook | None = None,
        lifecycle_config: LifecycleConfig | None = None,
        pool: PoolConfig | None = None,
        authority: SettingsAuthority | None = None,
        capacity: CapacityLimits | None = None,
    ) -> None:
        self.settings = settings or SettingsStore()
        #: Who may change the settings and how far (:meth:`configure`).
        self.authority = authority or SettingsAuthority()
        self.policy = policy or SandboxPolicy()
        self.plans = plans or PlanStore()
        self.interpreters = interpreters or Interpreters()
        self._require_approval = require_approval
        self.root_dir = Path(root_dir).resolve() if root_dir else None
        self.audit = audit
        #: MatrixLab Runner lifecycle config (server config); env applies on top per call.
        self.lifecycle_config = lifecycle_config or LifecycleConfig()
        # The parts; the policy and the approval switch are read through the service,
        # so replacing either on the service reaches every part.
        self.backends = BackendResolver(
            self.settings,
            self.interpreters,
            isolator=isolator,
            allowed_backends=allowed_backends,
            pool=pool,
            matrixlab_config=self.lifecycle_config,
        )
        self.workflow = PlanWorkflow(self.plans, self._emit)
        self.planner = Planner(
            settings=self.settings,
            resolver=self.backends,
            interpreters=self.interpreters,
            plans=self.plans,
            policy=lambda: self.policy,
            require_approval=lambda: self.require_approval,
            root_dir=self.root_dir,
        )
        self.executor = RunExecutor(
            settings=self.settings,
            resolver=self.backends,
            policy=lambda: self.policy,
            root_dir=self.root_dir,
            emit=self._emit,
            plans=self.plans,
            admission=Admission(capacity),
        )
        self.reporter = StatusReporter(
            settings=self.settings,
            resolver=self.backends,
            interpreters=self.interpreters,
            plans=self.plans,
            require_approval=lambda: self.require_approval,
            max_timeout_sec=lambda: self.policy.max_timeout_sec,
            capacity=self.executor.admission.report,
        )
        #: The sessions (kernels kept between cells) of this service, stopped with it.
        self.sessions = SessionDoor(
            SessionManager(
                self.backends.subprocess,
                idle_sec=lambda: self.settings.effective().settings.session_idle_min * 60,
            ),
            planner=self.planner,
            policy=lambda: self.policy,
            emit=self._emit,
            runs=self.executor,
        )
        #: Test connection and the Runner lifecycle (Docker), kept out of this module.
        self.matrixlab = MatrixLabOperations(self.settings, self.lifecycle_config, self._emit)

    # -- resolution -------------------------------------------------------------------

    @property
    def require_approval(self) -> bool:
        """Whether runs need an approval token (server config, else the env var)."""
        if self._require_approval is not None:
            return self._require_approval
        return approval_required_by_env(self.settings.environ)

    def _emit(self, event: str, data: dict[str, Any]) -> None:
        if self.audit is not None:
            self.audit(event, data)

    # -- plan -------------------------------------------------------------------------

    async def plan(
        self, options: RunOptions, caller: Caller = _ANYONE, *, agent: bool = False
    ) -> ExecutionPlan:
        """Describe what would run; keep it pending for approval. ``caller.user`` owns the plan.

        ``options.env`` names server variables to pass through to the run (``--env NAME``).
        ``agent=True`` is for the agent entry points only: the plan's source becomes
        ``agent`` (which no caller may give as ``source``), its ``env`` names must be on
        the agents' allowlist, and it counts against the user's agent plans, which no
        other traffic can evict.
        """
        file_text = None
        if options.file is not None and options.code is None:
            # Off the event loop: a file plan must never stall the server (the file is
            # stat-ed, then at most the limit is read).
            file_text = await asyncio.to_thread(self.planner.read_file, options.file)
        if options.source == AGENT_SOURCE:
            raise InvalidRequest(
                "source 'agent' is given by the agent entry points only "
                "(/api/sandbox/agent/plan, jupyter sandbox mcp)",
                code="invalid_value",
            )
        inputs = None
        if options.inputs:  # off the event loop too: they are walked and hashed
            inputs = await asyncio.to_thread(self.planner.inputs_of, options)
        plan = self.planner.describe(
            options, session_id=caller.session_id, file_text=file_text, agent=agent, inputs=inputs
        )
        if agent:
            plan.source = AGENT_SOURCE
        self.workflow.keep(plan, user=caller.user)
        return plan

    async def pending(self, caller: Caller = _ANYONE) -> list[ExecutionPlan]:
        """Plans waiting for someone else's decision that ``caller`` may see, oldest first.

        What Pending Plans lists and the status counts (:meth:`PlanStore.waiting`): an
        agent's undecided plans that can still be approved; a cell's, ▶ Run's or a REST
        caller's own plans are decided where they were made, blocked ones never can be.
        """
        return self.workflow.pending(user=caller.user, session_id=caller.session_id)

    async def running(self, caller: Caller = _ANYONE) -> list[RunUnderWay]:
        """Approved plans of the :meth:`pending` kind whose run is under way, oldest first.

        Each names its run id, which :meth:`cancel` stops; it leaves when the run ends.
        These no longer wait for anyone's decision (not in :meth:`pending`).
        """
        return self.workflow.running(user=caller.user, session_id=caller.session_id)

    # -- approve / reject ---------------------------------------------------------------

    async def approve(
        self, plan_id: str, caller: Caller = _ANYONE, *, approved_by: str = "user"
    ) -> dict[str, Any]:
        """Approve a pending plan: ``{approval_token, plan_id, expires_in}``."""
        return self.workflow.approve(
            plan_id, session_id=caller.session_id, user=caller.user, approved_by=approved_by
        )

    async def reject(self, plan_id: str, caller: Caller = _ANYONE) -> ExecutionPlan:
        """Drop a pending plan unapproved: it never runs; a waiting planner learns so."""
        return self.workflow.reject(plan_id, user=caller.user)

    # -- agents -------------------------------------------------------------------------

    async def plan_for_agent(
        self, options: RunOptions, caller: Caller = _ANYONE, *, auto_approve: bool = False
    ) -> AgentPlan:
        """An agent's plan: with ``auto_approve`` approved by the agent itself (its token),
        else a claim secret only the agent holds, to collect the token once a person approves.

        A blocked plan gets neither.
        """
        plan = await self.plan(options, caller, agent=True)
        return self.workflow.agent_ticket(
            plan, auto_approve=auto_approve, session_id=caller.session_id, user=caller.user
        )

    async def claim(self, plan_id: str, secret: str, caller: Caller = _ANYONE) -> ClaimAnswer:
        """``pending``, or ``approved`` with the token (handed over once).

        The hand-over of a token is audited (a ``claim`` event); polls that find the
        plan still pending are not.
        """
        return self.workflow.claim(plan_id, secret, user=caller.user)

    # -- run --------------------------------------------------------------------------

    async def run(
        self,
        approval_token: str | None,
        caller: Caller = _ANYONE,
        *,
        expected: RunOptions | None = None,
        on_output: OutputCallback | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run the approved plan ``approval_token`` stands for: the one way to run by token.

        ``expected`` is the long form of a run (what the caller asks to run, checked
        against the approved plan's spec; with approval switched off, the spec built
        from it runs). Order of checks then: backend, approval, language, code, policy.
        ``run_id`` (``run_`` + 16 hex) lets the caller stop the run with :meth:`cancel`
        before it ends; one is made up when none is given. A stopped run answers its
        envelope with ``cancelled=True`` and the output produced until then.
        """
        check_run_id(run_id)
        approval: Approval | None
        if expected is None:
            approval = self.workflow.redeem(
                approval_token, digest=None, session_id=caller.session_id, user=caller.user
            )
            spec = approval.plan.spec
        else:
            inputs: tuple[RunInput, ...] | SandboxError = ()
            try:  # the inputs as they are now: hashed again, off the event loop
                if expected.inputs:
                    inputs = await asyncio.to_thread(self.planner.inputs_of, expected)
            except SandboxError as exc:
                inputs = exc
            approval, spec = self._check_long_form(expected, approval_token, caller, inputs)
        if spec.session is not None:  # a cell of a session: to its kernel, nowhere else
            return await self.sessions.run_cell(
                spec, approval, caller, on_output=on_output, run_id=run_id
            )
        return await self.executor.execute(
            spec,
            plan_id=approval.plan_id if approval is not None else None,
            user=caller.user,
            on_output=on_output,
            run_id=run_id,
            approval=approval,
        )

    def _check_long_form(
        self,
        expected: RunOptions,
        approval_token: str | None,
        caller: Caller,
        inputs: tuple[RunInput, ...] | SandboxError = (),
    ) -> tuple[Approval | None, RunSpec]:
        """The approval (``None`` with approval off) and the spec a long-form run runs
        (``inputs``: its inputs as :meth:`.planner.Planner.inputs_of` found them, or why not)."""
        for field_name, text in (("code", expected.code), ("stdin", expected.stdin)):
            if isinstance(text, str):
                check_text(field_name, text)  # a lone surrogate is bad input, never a 500
        self.backends.resolve(expected.backend)  # an unknown or refused backend is a 400 / 403
        try:
            if isinstance(inputs, SandboxError):
                raise inputs
            spec: RunSpec | None = self.planner.spec(expected.but(file=None), inputs=inputs)
            invalid: SandboxError | None = None
        except SandboxError as exc:  # refused after the approval check, as the contract orders
            spec, invalid = None, exc
        approval: Approval | None = None
        if self.require_approval:
            approval = self.workflow.redeem(
                approval_token,
                digest=spec.digest if spec is not None else _NO_DIGEST,
                session_id=caller.session_id,
                user=caller.user,
            )
            spec = approval.plan.spec
        if invalid is not None:
            raise invalid
        assert spec is not None
        return approval, spec

    async def run_plan(
        self,
        plan: ExecutionPlan,
        caller: Caller = _ANYONE,
        *,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        """Run ``plan`` under the same policy as :meth:`run`, without asking for its token.

        For the core's own callers that hold an approval covering the plan (a batch
        approved as a whole); never for a face passing on a request. The plan's spec
        runs (a Dask worker gives its plan the spec its own :meth:`spec` built). Over the
        server's caps it waits for a slot (an item of an approved batch is not refused).
        """
        return await self.executor.execute(
            plan.spec, plan_id=plan.plan_id, user=caller.user, on_output=on_output, wait=True
        )

    def cancel(self, run_id: str, caller: Caller = _ANYONE) -> dict[str, Any]:
        """Stop a run under way: its process is killed and its envelope says ``cancelled``.

        A session's cell is interrupted instead (as Jupyter's interrupt): its session
        keeps its kernel and state, the answer names the ``session`` and the cell's
        envelope says ``cancelled`` with a note that the session lives on.

        Callable from any thread; it returns at once (the run answers its envelope).
        :class:`RunNotFound` when no such run is under way (unknown, or already over),
        or when it belongs to another user.
        """
        return self.executor.cancel(run_id, user=caller.user)

    def run_file(self, run_id: str, name: str, caller: Caller = _ANYONE) -> bytes:
        """The bytes of ``name`` (relative to ``out/``) that run ``run_id`` handed back.

        Blocking (a file read: a face calls it off its event loop). Only the run's owner
        gets them (the rule plans follow); :class:`~.errors.RunFileNotFound` for an
        unknown, expired or someone else's run or file, and
        :class:`~.errors.InvalidRequest` for a name that cannot be one of ``out/``.
        """
        return self.executor.out_store.read(run_id, name, caller.user)

    async def plan_and_run(
        self,
        options: RunOptions,
        caller: Caller = _ANYONE,
        *,
        approved_by: str | None = None,
        confirmed: bool = False,
        on_output: OutputCallback | None = None,
        run_id: str | None = None,
    ) -> PlannedRun:
        """Plan and, where the caller may approve its own plan, approve and run it: one call.

        For a caller whose own act is the approval (executing a ``%%sandbox`` cell, a
        diagnostic probe): the plan is approved by it (``approved_by``, default the
        plan's ``source``) and run, streaming to ``on_output``. A plan that needs a
        person's look (:meth:`ExecutionPlan.needs_a_look`: a high warning not
        ``confirmed`` beforehand) is kept pending and answered unrun, for an approval
        card that approves and runs it later (:meth:`approve`, :meth:`run`). A blocked
        plan raises :class:`PlanBlocked` and never runs. The audit records the plan,
        the approval and the run, as the three calls do.
        """
        check_run_id(run_id)
        plan = await self.plan(options, caller)
        if plan.blocked:
            raise PlanBlocked(blocked_message(plan))
        if plan.needs_a_look(confirmed=confirmed):
            return PlannedRun(plan)
        approval = await self.approve(
            plan.plan_id, caller, approved_by=approved_by or options.source
        )
        result = await self.run(
            approval["approval_token"], caller, on_output=on_output, run_id=run_id
        )
        return PlannedRun(plan, result)

    # -- status and config --------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The effective settings, masked (``has_token``, never the token)."""
        return self.settings.effective().settings.masked()

    def prewarm(self, languages: Iterable[str] = ("python",)) -> list[str]:
        """Start warm slots for a default run of each language (the settings as they are
        now), so the first run is warm too; the languages that got them."""
        warmed = []
        for language in languages:
            try:
                spec = self.planner.spec(RunOptions(language=language, code="pass"))
            except SandboxError:
                continue  # not installed, not allowed: its first run says why
            if self.executor.prewarm(spec):
                warmed.append(spec.language)
        return warmed

    async def configure(
        self, changes: Mapping[str, object], *, user: str | None = None, confirm: bool = False
    ) -> Status:
        """Persist a subset of settings (validated, env values never written); return status.

        ``user`` (None: the one principal of a shared secret) must be allowed by
        :attr:`authority`: an owner where identities are real, and a change that weakens
        a wall needs the administrator's word (:class:`.errors.SettingNotAllowed`).
        A backend must be one the administrator allows (``off`` is not, by default).
        Switching the backend to ``off`` needs ``confirm=True`` besides, which a face
        passes only after its user said yes (else :class:`.errors.ConfirmationRequired`).
        Nothing is saved when any of these refuses.
        """
        if not isinstance(changes, Mapping):
            raise InvalidRequest("the settings must be a JSON object")
        current = self.settings.effective().settings
        self.authority.check(
            changes,
            user=user,
            network_now=current.allow_network,
            max_timeout_sec=self.policy.max_timeout_sec,
        )
        if "backend" in changes:
            # Saving a backend the server refuses would break every later run.
            self.backends.check_allowed(check_backend(changes["backend"]))
        check_off_confirmed(changes, current.backend, confirm)
        self.settings.update(changes)
        # Waiting slots were made for the old settings: new ones follow the new key.
        self.backends.subprocess.flush_pool()
        self._emit("config", {"user": user, "keys": sorted(changes)})
        return await self.status()

    async def status(self) -> Status:
        """Live backend, masked settings, health, env override, approval and isolation."""
        return await self.reporter.status()

    async def aclose(self) -> None:
        """Stop every session, then release backend resources; the runs' kept files are
        removed."""
        try:
            await self.sessions.aclose()
            await self.backends.aclose()
        finally:
            await asyncio.to_thread(self.executor.out_store.close)
