"""SandboxService: the one door every face calls.

plan -> approve -> run (or run an approved plan by its token alone), pending,
reject, the agents' plan / claim, status, configure and the MatrixLab lifecycle.
Each call emits its audit event; no face touches the plan or claim stores.
A run is defined once, by :meth:`SandboxService.spec` (see :mod:`.spec`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._version import __version__
from .backend import OutputCallback, ResourceLimits, RunRequest, SandboxBackend
from .claims import AgentPlan, ClaimAnswer, ClaimStore
from .errors import (
    BackendNotAllowed,
    EmptyCode,
    InvalidRequest,
    NotPlanOwner,
    PlanNotFound,
    RunNotFound,
    SandboxError,
    UnknownBackend,
)
from .files import path_under_root, read_under_root
from .languages import CANONICAL_LANGUAGES, Interpreters, canonical_language, language_for_path
from .local.backends import NullSandbox, SubprocessSandbox
from .local.isolation import Isolator
from .local.off import OFF_NETWORK_CHECK, OFF_WARNING, is_off, network_for
from .matrixlab.config import LifecycleConfig
from .matrixlab.ops import MatrixLabOperations, ProgressCallback
from .plans import AGENT_SOURCE, SOURCES, ExecutionPlan, PlanStore, new_plan_id
from .policy import SandboxPolicy, env_names, find_destructive
from .records import Check, Status
from .results import RunResult, new_run_id
from .scan import scan
from .settings import (
    BACKENDS,
    EffectiveSettings,
    SandboxSettings,
    SettingsStore,
    check_backend,
    env_flag,
)
from .spec import RunSpec
from .text import check_text

REQUIRE_APPROVAL_ENV = "GITPILOT_SANDBOX_REQUIRE_APPROVAL"
MAX_CODE_CHARS = 1_000_000
#: A run id a caller may choose (so it can stop the run before the answer comes back).
RUN_ID_PATTERN = re.compile(r"^run_[0-9a-f]{16}$")
#: Seconds a stopped backend gets to answer its own envelope (with the output so far)
#: before the service cancels it outright.
STOP_GRACE_SEC = 5.0

#: Receives ``(event_name, data)`` for every plan, approval, run and config change.
AuditHook = Callable[[str, dict[str, Any]], None]


@dataclass
class ActiveRun:
    """A run under way: who started it, and how to stop it from any thread."""

    run_id: str
    user: str | None
    backend: str
    loop: asyncio.AbstractEventLoop
    stop: asyncio.Event
    started: float

    def request_stop(self) -> None:
        """Ask the run to stop (thread-safe: the event belongs to the run's loop)."""
        self.loop.call_soon_threadsafe(self.stop.set)


def approval_required_by_env(environ: Mapping[str, str]) -> bool:
    """False only when ``GITPILOT_SANDBOX_REQUIRE_APPROVAL`` is set to a false value."""
    return env_flag(environ, REQUIRE_APPROVAL_ENV, default=True)


#: What a long-form run that cannot match any plan is checked against.
_NO_DIGEST = "sha256:none"


def check_run_id(run_id: str | None) -> None:
    """Refuse a caller-chosen run id that is not ``run_`` + 16 hex digits."""
    if run_id is not None and not RUN_ID_PATTERN.match(str(run_id)):
        raise InvalidRequest("run_id must be 'run_' followed by 16 hex digits")


def _not_found(plan_id: str) -> PlanNotFound:
    # Someone else's plan is answered as an unknown one: its existence is not disclosed.
    return PlanNotFound(f"no pending plan {plan_id!r} (unknown, expired or already approved)")


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
    ) -> None:
        self.settings = settings or SettingsStore()
        self.policy = policy or SandboxPolicy()
        self.plans = plans or PlanStore()
        #: Lets a planner (an agent in ``ask`` mode) collect the token once a human approves.
        self.claims = ClaimStore(self.plans)
        self.interpreters = interpreters or Interpreters()
        self._require_approval = require_approval
        self.allowed_backends = tuple(allowed_backends) if allowed_backends else BACKENDS
        self.root_dir = Path(root_dir).resolve() if root_dir else None
        self.audit = audit
        #: MatrixLab Runner lifecycle config (server config); env applies on top per call.
        self.lifecycle_config = lifecycle_config or LifecycleConfig()
        #: Test connection and the Runner lifecycle (Docker), kept out of this module.
        self.matrixlab = MatrixLabOperations(self.settings, self.lifecycle_config, self._emit)
        #: Runs under way by run id, so :meth:`cancel` can stop them.
        self._runs: dict[str, ActiveRun] = {}
        self._runs_lock = threading.Lock()
        self._local: dict[str, SandboxBackend] = {
            "subprocess": SubprocessSandbox(self.interpreters, isolator),
            "off": NullSandbox(self.interpreters),
        }

    # -- resolution -------------------------------------------------------------------

    @property
    def require_approval(self) -> bool:
        """Whether runs need an approval token (server config, else the env var)."""
        if self._require_approval is not None:
            return self._require_approval
        return approval_required_by_env(self.settings.environ)

    def resolve(self, backend: str | None = None) -> tuple[str, EffectiveSettings]:
        """The backend for a call: explicit > env > file > default, checked every time."""
        effective = self.settings.effective()
        if backend is not None:
            name = check_backend(backend)
        elif effective.env_error and effective.env_override == "GITPILOT_SANDBOX":
            raise UnknownBackend(effective.env_error)
        else:
            name = effective.settings.backend
        return self.check_allowed(name), effective

    def check_allowed(self, name: str) -> str:
        """``name`` when the administrator allows that backend, else :class:`BackendNotAllowed`."""
        if name not in self.allowed_backends:
            raise BackendNotAllowed(
                f"the sandbox backend {name!r} is not allowed on this server; "
                f"allowed: {list(self.allowed_backends)}"
            )
        return name

    def backend(self, name: str, settings: SandboxSettings) -> SandboxBackend:
        """The backend object for ``name`` configured from ``settings``."""
        if name in self._local:
            return self._local[name]
        from .matrixlab.backend import MatrixLabSandbox

        return MatrixLabSandbox(
            url=settings.matrixlab_url,
            token=settings.matrixlab_token,
            image=settings.matrixlab_image,
        )

    def _emit(self, event: str, data: dict[str, Any]) -> None:
        if self.audit is not None:
            self.audit(event, data)

    def _disk_check(self, settings: SandboxSettings) -> Check:
        """The plan's line on the run's writable space: capped (verified layer) or not."""
        local = self._local["subprocess"]
        capped = isinstance(local, SubprocessSandbox) and "disk-cap" in local.isolation()
        if capped:
            label = f"writable space capped at {settings.disk_limit_mb} MB"
        else:
            label = "writable space not capped on this host (see jupyter sandbox status)"
        return {"label": label, "ok": capped}

    def _network_check(self) -> Check:
        """The plan's line on a network-on run: its own stack (verified layer) or the host's."""
        local = self._local["subprocess"]
        own = isinstance(local, SubprocessSandbox) and "egress-only" in local.isolation(
            allow_network=True
        )
        if own:
            return {"label": "network on: its own stack, the host not reachable", "ok": True}
        return {
            "label": "network on shares the host's network: its loopback and services are "
            "reachable (see jupyter sandbox status)",
            "ok": False,
        }

    def _command(self, language: str) -> list[str]:
        return self.interpreters.display_command(language)

    @staticmethod
    def _limits(settings: SandboxSettings) -> ResourceLimits:
        return ResourceLimits(
            memory_mb=settings.memory_limit_mb,
            max_processes=settings.max_processes,
            max_file_size_mb=settings.max_file_size_mb,
            disk_mb=settings.disk_limit_mb,
        )

    # -- the run spec -----------------------------------------------------------------

    def spec(
        self,
        *,
        language: str,
        code: str,
        stdin: str | None = None,
        timeout_sec: int | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        env: Sequence[str] | None = None,
        file: str | None = None,
    ) -> RunSpec:
        """The one definition of a run: what planning describes and a long-form run checks.

        Canonical language, the timeout clamped by the policy (the settings' default
        within the server's maximum), network and backend resolved from the settings,
        the server variables passed through (``env``, checked names), the resource
        limits in force and, for a file run, the file. Raises the typed error of the
        first bad field.
        """
        name, effective = self.resolve(backend)
        settings = effective.settings
        requested = settings.allow_network if allow_network is None else bool(allow_network)
        return RunSpec(
            language=canonical_language(language),
            code=code,
            stdin=stdin,
            timeout_sec=self.policy.timeout(timeout_sec, settings.timeout_sec),
            network=network_for(name, requested),  # off: the host's network, whatever was asked
            backend=name,
            env=env_names(env),
            limits=self._limits(settings),
            file=file,
        )

    # -- plan -------------------------------------------------------------------------

    def read_file(self, file: str) -> str:
        """The text of ``file`` under the root folder (the cwd when none); nothing outside it."""
        return read_under_root(self.root_dir or Path.cwd().resolve(), file)

    async def plan(
        self,
        *,
        language: str | None = None,
        code: str | None = None,
        file: str | None = None,
        source: str = "api",
        timeout_sec: int | None = None,
        stdin: str | None = None,
        session_id: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        user: str | None = None,
        env: Sequence[str] | None = None,
        agent: bool = False,
    ) -> ExecutionPlan:
        """Describe what would run; keep it pending for approval. ``user`` owns the plan.

        ``env`` names server variables to pass through to the run (``--env NAME``).
        ``agent=True`` is for the agent entry points only: the plan's source becomes
        ``agent`` (which no caller may give as ``source``) and it counts against the
        user's agent plans, which no other traffic can evict.
        """
        file_text = None
        if file is not None and code is None:
            # Off the event loop: a file plan must never stall the server (the file is
            # stat-ed, then at most the limit is read).
            file_text = await asyncio.to_thread(self.read_file, file)
        if source == AGENT_SOURCE:
            raise InvalidRequest(
                "source 'agent' is given by the agent entry points only "
                "(/api/sandbox/agent/plan, jupyter sandbox mcp)",
                code="invalid_value",
            )
        plan = self.describe(
            file_text=file_text,
            language=language,
            code=code,
            file=file,
            source=source,
            timeout_sec=timeout_sec,
            stdin=stdin,
            session_id=session_id,
            backend=backend,
            allow_network=allow_network,
            env=env,
        )
        if agent:
            plan.source = AGENT_SOURCE
        plan.owner = user
        self.plans.add(plan, owner=user)
        self._emit(
            "plan",
            {
                "user": user,
                "plan_id": plan.plan_id,
                "digest": plan.digest,
                "language": plan.language,
                "backend": plan.backend,
                "blocked": plan.blocked,
                "source": plan.source,
            },
        )
        return plan

    def describe(
        self,
        *,
        language: str | None = None,
        code: str | None = None,
        file: str | None = None,
        source: str = "api",
        timeout_sec: int | None = None,
        stdin: str | None = None,
        session_id: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        file_text: str | None = None,
        env: Sequence[str] | None = None,
    ) -> ExecutionPlan:
        """The plan :meth:`plan` would make, neither kept nor audited (a batch plans with it).

        ``file_text`` is ``file``'s content when the caller has read it already.
        """
        if source not in SOURCES:
            raise InvalidRequest(f"unknown source {source!r}; expected one of {list(SOURCES)}")
        if file is not None:
            if code is not None:
                raise InvalidRequest("give either code or file, not both")
            code = self.read_file(file) if file_text is None else file_text
            lang = canonical_language(language) if language else language_for_path(file)
        else:
            if language is None:
                raise InvalidRequest("language is required", code="missing_field")
            lang = canonical_language(language)
            if code is None:
                raise InvalidRequest("code is required", code="missing_field")
        check_text("code", code)
        if stdin is not None:
            check_text("stdin", stdin)
        if not code.strip():
            raise EmptyCode("there is no code to run")
        if len(code) > MAX_CODE_CHARS:
            raise InvalidRequest(f"code is longer than {MAX_CODE_CHARS} characters")
        spec = self.spec(
            language=lang,
            code=code,
            stdin=stdin,
            timeout_sec=timeout_sec,
            backend=backend,
            allow_network=allow_network,
            env=env,
            file=file,
        )
        name, names, timeout, network = spec.backend, spec.env, spec.timeout_sec, spec.network
        settings = self.settings.effective().settings
        runner = self.backend(name, settings)
        command = runner.display_command(lang, file) or self._command(lang)
        blocked_label = find_destructive(" ".join(command))
        if lang == "bash" and blocked_label is None:
            blocked_label = find_destructive(code)
        checks: list[Check] = [
            {"label": f"language {lang} is supported", "ok": True},
            {"label": "no destructive pattern", "ok": blocked_label is None},
            {"label": f"timeout {timeout} s within 1..{self.policy.max_timeout_sec}", "ok": True},
            {"label": self._network_label(name, network), "ok": not network},
        ]
        if name in self._local:
            found = self.interpreters.resolve(lang) is not None
            checks.insert(1, {"label": f"{command[0]} interpreter installed", "ok": found})
        checks += [
            {"label": note, "ok": False} for note in runner.limit_notes(self._limits(settings))
        ]
        if name == "subprocess":
            checks.append(self._disk_check(settings))
            if network:
                checks.append(self._network_check())
        if names:
            unset = [n for n in names if n not in os.environ]
            label = "passes the server's " + ", ".join(names)
            if unset:
                label += f" (not set on the server: {', '.join(unset)})"
            checks.append({"label": label, "ok": not unset})
        lines = code.count("\n") + (0 if code.endswith("\n") else 1)
        goal = f"Run {file}" if file else f"Run a {lang} snippet ({lines} line{'s' * (lines != 1)})"
        return ExecutionPlan(
            plan_id=new_plan_id(),
            goal=goal,
            source="file_run" if file and source == "api" else source,
            language=lang,
            command=command,
            backend=name,
            timeout_sec=timeout,
            network=network,
            checks=checks,
            warnings=([OFF_WARNING.copy()] if is_off(name) else []) + scan(lang, code),
            blocked=blocked_label is not None,
            blocked_reason=f"destructive pattern {blocked_label!r}" if blocked_label else None,
            requires_approval=self.require_approval,
            digest=spec.digest,
            created_at=self.plans.clock(),
            code=code,
            stdin=stdin,
            file=file,
            session_id=session_id,
            env=list(names),
            spec=spec,
        )

    @staticmethod
    def _network_label(backend: str, network: bool) -> str:
        if is_off(backend):
            return OFF_NETWORK_CHECK
        return "network allowed" if network else "network disabled"

    # -- ownership --------------------------------------------------------------------

    @staticmethod
    def _visible(plan: ExecutionPlan, user: str | None) -> bool:
        """Whether ``user`` may see and decide ``plan``.

        A plan belongs to the identity that made it. ``None`` on either side is a
        shared principal (jupyter_server's token login, an in-process face): no
        restriction then, as before plans had owners.
        """
        return plan.owner is None or user is None or plan.owner == user

    def _pending_plan(self, plan_id: str, user: str | None) -> ExecutionPlan:
        """A pending plan ``user`` may decide; someone else's is as unknown as a missing one."""
        plan = self.plans.get(plan_id)
        if not self._visible(plan, user):
            raise PlanNotFound(
                f"no pending plan {plan_id!r} (unknown, expired or already approved)"
            )
        return plan

    async def pending(
        self, *, user: str | None = None, session_id: str | None = None
    ) -> list[ExecutionPlan]:
        """Plans waiting for someone else's decision that ``user`` may see, oldest first.

        What Pending Plans lists and the status counts (:meth:`PlanStore.waiting`): an
        agent's undecided plans that can still be approved; a cell's, ▶ Run's or a REST
        caller's own plans are decided where they were made, blocked ones never can be.
        """
        return [plan for plan in self.plans.waiting(session_id) if self._visible(plan, user)]

    # -- approve / reject ---------------------------------------------------------------

    async def approve(
        self,
        plan_id: str,
        *,
        session_id: str | None = None,
        user: str | None = None,
        approved_by: str = "user",
    ) -> dict[str, Any]:
        """Approve a pending plan: ``{approval_token, plan_id, expires_in}``."""
        plan = self._pending_plan(plan_id, user)
        approval = self.plans.approve(
            plan_id, session_id=session_id, user=user, approved_by=approved_by
        )
        self._emit(
            "approve",
            {
                "user": user,
                "plan_id": plan_id,
                "digest": plan.digest,
                "language": plan.language,
                "backend": plan.backend,
                "approved_by": approved_by,
            },
        )
        return approval.to_dict(self.plans.clock())

    async def reject(self, plan_id: str, *, user: str | None = None) -> ExecutionPlan:
        """Drop a pending plan unapproved: it never runs; a waiting planner learns so."""
        self._pending_plan(plan_id, user)
        plan = self.plans.reject(plan_id)
        self._emit(
            "reject",
            {
                "user": user,
                "plan_id": plan_id,
                "digest": plan.digest,
                "language": plan.language,
                "backend": plan.backend,
                "source": plan.source,
            },
        )
        return plan

    # -- agents -------------------------------------------------------------------------

    async def plan_for_agent(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        session_id: str | None = None,
        auto_approve: bool = False,
        user: str | None = None,
        env: Sequence[str] | None = None,
    ) -> AgentPlan:
        """An agent's plan: with ``auto_approve`` approved by the agent itself (its token),
        else a claim secret only the agent holds, to collect the token once a person approves.

        A blocked plan gets neither.
        """
        plan = await self.plan(
            language=language,
            code=code,
            timeout_sec=timeout_sec,
            session_id=session_id,
            agent=True,
            user=user,
            env=env,
        )
        ticket = AgentPlan(plan)
        if plan.blocked:
            return ticket
        if auto_approve:
            approval = await self.approve(
                plan.plan_id, session_id=session_id, user=user, approved_by="agent"
            )
            ticket.approval_token = str(approval["approval_token"])
        else:
            ticket.claim = self.claims.open(plan.plan_id)
        return ticket

    async def claim(self, plan_id: str, secret: str, *, user: str | None = None) -> ClaimAnswer:
        """``pending``, or ``approved`` with the token (handed over once).

        The hand-over of a token is audited (a ``claim`` event); polls that find the
        plan still pending are not.
        """
        try:
            plan: ExecutionPlan | None = self.plans.get(plan_id)
        except PlanNotFound:
            plan = None
        if plan is not None and not self._visible(plan, user):
            raise _not_found(plan_id)
        if plan is None:  # decided: only its owner may collect the token (checked first)
            approval = self.plans.approval_for(plan_id)
            if approval is not None:
                self._check_owner(approval.owner, user)
        answer = self.claims.claim(plan_id, secret)
        if answer.state == "approved":
            self._emit("claim", {"user": user, "plan_id": plan_id, "state": answer.state})
        return answer

    # -- run --------------------------------------------------------------------------

    async def run(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        stdin: str | None = None,
        approval_token: str | None = None,
        session_id: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        user: str | None = None,
        on_output: OutputCallback | None = None,
        env: Sequence[str] | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """The long form of a run: what to run, checked against the approved plan's spec.

        Order of checks: backend, approval, language, code, policy. With approval
        switched off, the spec built here runs; else the approved plan's spec.
        ``env`` must name the same variables as the approved plan (the digest binds them).
        ``run_id`` (``run_`` + 16 hex) lets the caller stop the run with :meth:`cancel`
        before it ends; one is made up when none is given. A stopped run answers its
        envelope with ``cancelled=True`` and the output produced until then.
        """
        check_run_id(run_id)
        for field_name, text in (("code", code), ("stdin", stdin)):
            if isinstance(text, str):
                check_text(field_name, text)  # a lone surrogate is bad input, never a 500
        self.resolve(backend)  # an unknown or refused backend is a 400 / 403 first
        try:
            spec: RunSpec | None = self.spec(
                language=language,
                code=code,
                stdin=stdin,
                timeout_sec=timeout_sec,
                backend=backend,
                allow_network=allow_network,
                env=env,
            )
            invalid: SandboxError | None = None
        except SandboxError as exc:  # refused after the approval check, as the contract orders
            spec, invalid = None, exc
        plan_id: str | None = None
        if self.require_approval:
            approval = self.plans.redeem(
                approval_token,
                digest=spec.digest if spec is not None else _NO_DIGEST,
                session_id=session_id,
                user=user,
            )
            self._check_owner(approval.owner, user)
            plan_id = approval.plan_id
            spec = approval.spec or spec
        if invalid is not None:
            raise invalid
        assert spec is not None
        return await self._execute(
            spec, plan_id=plan_id, user=user, on_output=on_output, run_id=run_id
        )

    async def run_approved(
        self,
        approval_token: str | None,
        *,
        session_id: str | None = None,
        user: str | None = None,
        on_output: OutputCallback | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run an approved plan by its token alone: the code does not travel again."""
        check_run_id(run_id)
        approval = self.plans.redeem(approval_token, digest=None, session_id=session_id, user=user)
        self._check_owner(approval.owner, user)
        if approval.spec is None:  # a plan made before specs (cannot happen in one process)
            raise InvalidRequest("this approval has no run attached; plan and approve again")
        return await self._execute(
            approval.spec,
            plan_id=approval.plan_id,
            user=user,
            on_output=on_output,
            run_id=run_id,
        )

    async def run_plan(
        self,
        plan: ExecutionPlan,
        *,
        user: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        """Run ``plan`` under the same policy as :meth:`run`, without asking for its token.

        For the core's own callers that hold an approval covering the plan (a batch
        approved as a whole); never for a face passing on a request. A plan that
        crossed a process boundary (no spec attached) has its spec built again by
        :meth:`spec`, the one definition of a run.
        """
        spec = plan.spec or self.spec(
            language=plan.language,
            code=plan.code,
            stdin=plan.stdin,
            timeout_sec=plan.timeout_sec,
            backend=plan.backend,
            allow_network=plan.network,
            env=plan.env,
            file=plan.file,
        )
        return await self._execute(spec, plan_id=plan.plan_id, user=user, on_output=on_output)

    @staticmethod
    def _check_owner(owner: str | None, user: str | None) -> None:
        if owner is not None and user is not None and owner != user:
            raise NotPlanOwner("this approval is for a plan someone else made")

    async def _execute(
        self,
        spec: RunSpec,
        *,
        plan_id: str | None,
        user: str | None,
        on_output: OutputCallback | None,
        run_id: str | None = None,
    ) -> RunResult:
        """Run ``spec`` under the policy on its backend; audit the run, whatever happens."""
        if not isinstance(spec.code, str) or not spec.code.strip():
            raise EmptyCode("there is no code to run")
        command = self._command(spec.language)
        self.policy.check_destructive(spec.language, spec.code, command)
        name = self.check_allowed(spec.backend)
        settings = self.settings.effective().settings
        file_path = None
        if spec.file is not None:
            # A file run: the backend may send the file's folder along (matrixlab does).
            root = self.root_dir or Path.cwd().resolve()
            file_path = await asyncio.to_thread(path_under_root, root, spec.file)
        request = RunRequest(
            language=spec.language,
            code=spec.code,
            timeout_sec=spec.timeout_sec,
            stdin=spec.stdin,
            allow_network=spec.network,
            env=self.policy.scrub_env(os.environ, allow_network=spec.network, passthrough=spec.env),
            max_output_bytes=self.policy.max_output_bytes,
            limits=spec.limits,
            plan_id=plan_id,
            file=file_path,
            run_id=run_id or new_run_id(),
        )
        result: RunResult | None = None
        failure: BaseException | None = None
        started = time.monotonic()
        try:
            result = await self._run_stoppable(
                self.backend(name, settings), request, on_output, user
            )
        except BaseException as exc:
            failure = exc
            raise
        finally:
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

    async def _run_stoppable(
        self,
        backend: SandboxBackend,
        request: RunRequest,
        on_output: OutputCallback | None,
        user: str | None,
    ) -> RunResult:
        """Run ``request`` on ``backend`` while it can be stopped by :meth:`cancel`."""
        stop = asyncio.Event()
        request.stop = stop
        active = ActiveRun(
            run_id=request.run_id,
            user=user,
            backend=backend.name,
            loop=asyncio.get_running_loop(),
            stop=stop,
            started=time.monotonic(),
        )
        with self._runs_lock:
            if request.run_id in self._runs:
                raise InvalidRequest(
                    f"a run with id {request.run_id} is already under way", code="run_id_in_use"
                )
            self._runs[request.run_id] = active
        task = asyncio.ensure_future(backend.run(request, on_output))
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                # Stopped: a backend that honours request.stop answers with its output so far.
                await asyncio.wait({task}, timeout=STOP_GRACE_SEC)
            if task.done():
                return task.result()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return RunResult(
                backend=backend.name,
                language=request.language,
                command=self._command(request.language),
                exit_code=-1,
                cancelled=True,
                duration_ms=int((time.monotonic() - active.started) * 1000),
                run_id=request.run_id,
                plan_id=request.plan_id,
                isolation=backend.isolation(),
            )
        finally:
            stopped.cancel()
            if not task.done():
                # The caller itself was cancelled (an interrupted cell): the backend's
                # clean-up kills the process tree before this returns.
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            with self._runs_lock:
                self._runs.pop(request.run_id, None)

    def cancel(self, run_id: str, *, user: str | None = None) -> dict[str, Any]:
        """Stop a run under way: its process is killed and its envelope says ``cancelled``.

        Callable from any thread; it returns at once (the run answers its envelope).
        :class:`RunNotFound` when no such run is under way (unknown, or already over),
        or when it belongs to another user.
        """
        with self._runs_lock:
            active = self._runs.get(str(run_id))
        if active is None or (active.user is not None and user is not None and active.user != user):
            raise RunNotFound(f"no run {run_id!r} is under way (unknown, or already over)")
        active.request_stop()
        self._emit("cancel", {"user": user, "run_id": active.run_id, "backend": active.backend})
        return {"run_id": active.run_id, "cancelled": True}

    def active_runs(self) -> list[str]:
        """The ids of the runs under way, oldest first."""
        with self._runs_lock:
            return list(self._runs)

    async def run_approved_here(
        self,
        *,
        language: str,
        code: str,
        source: str = "api",
        approved_by: str = "user",
        timeout_sec: int | None = None,
        stdin: str | None = None,
        session_id: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        user: str | None = None,
        on_output: OutputCallback | None = None,
        env: Sequence[str] | None = None,
        run_id: str | None = None,
    ) -> tuple[ExecutionPlan, RunResult]:
        """Plan, approve in-process and run: for faces where the caller is the approver.

        A blocked plan raises :class:`PlanBlocked` and never runs.
        """
        plan = await self.plan(
            language=language,
            code=code,
            source=source,
            timeout_sec=timeout_sec,
            stdin=stdin,
            session_id=session_id,
            backend=backend,
            allow_network=allow_network,
            user=user,
            env=env,
        )
        approval = await self.approve(
            plan.plan_id, session_id=session_id, user=user, approved_by=approved_by
        )
        result = await self.run_approved(
            approval["approval_token"],
            session_id=session_id,
            user=user,
            on_output=on_output,
            run_id=run_id,
        )
        return plan, result

    # -- status and config --------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The effective settings, masked (``has_token``, never the token)."""
        return self.settings.effective().settings.masked()

    async def configure(self, changes: Mapping[str, object], *, user: str | None = None) -> Status:
        """Persist a subset of settings (validated, env values never written); return status."""
        if not isinstance(changes, Mapping):
            raise InvalidRequest("the settings must be a JSON object")
        if "backend" in changes:
            # Saving a backend the server refuses would break every later run.
            self.check_allowed(check_backend(changes["backend"]))
        # Switching to ``off`` is confirmed by each face (sandbox.local.off.off_confirmation).
        self.settings.update(changes)
        self._emit("config", {"user": user, "keys": sorted(changes)})
        return await self.status()

    async def status(self) -> Status:
        """Live backend, masked settings, health, env override, approval and isolation."""
        effective = self.settings.effective()
        settings = effective.settings
        error: str | None = effective.env_error
        name: str | None = None
        remote: Any = None
        ok = error is None
        isolation: list[str] = []
        try:
            name, _ = self.resolve()
        except (UnknownBackend, BackendNotAllowed) as exc:
            error, ok = exc.message, False
        if name is not None:
            backend = self.backend(name, settings)
            health = await backend.health()
            ok = ok and bool(health.get("ok"))
            error = error or health.get("error")
            remote = health.get("remote")
            if isinstance(backend, SubprocessSandbox):
                # The network layer depends on the setting a run would use.
                isolation = backend.isolation(allow_network=settings.allow_network)
            else:
                isolation = backend.isolation()
        local = self._local["subprocess"]
        assert isinstance(local, SubprocessSandbox)
        return {
            "backend": name,
            "settings": settings.masked(),
            "has_token": bool(settings.matrixlab_token),
            "ok": ok,
            "error": error,
            "remote": remote,
            "env_override": effective.env_override,
            "env_error": effective.env_error,
            "require_approval": self.require_approval,
            "isolation": isolation,
            "isolation_report": local.isolator.report(),
            "settings_error": effective.settings_error,
            "settings_path": str(self.settings.path),
            "allowed_backends": list(self.allowed_backends),
            "waiting_plans": len(self.plans.waiting()),
            "languages": {
                lang: self.interpreters.resolve(lang) is not None for lang in CANONICAL_LANGUAGES
            },
            "version": __version__,
        }

    # -- MatrixLab ------------------------------------------------------------------------

    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """Test connection to a Runner (the saved URL / token unless unsaved ones are given)."""
        return await self.matrixlab.test_connection(url=url, token=token)

    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None, *, user: str | None = None
    ) -> dict[str, Any]:
        """``status`` | ``install`` | ``start`` | ``stop`` of the MatrixLab Runner (audited)."""
        return await self.matrixlab.lifecycle(action, progress, user=user)

    async def aclose(self) -> None:
        """Release backend resources."""
        for backend in self._local.values():
            await backend.aclose()
