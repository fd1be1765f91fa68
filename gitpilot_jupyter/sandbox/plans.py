"""Execution plans and the approval store.

A plan describes what would run. Approving it mints a single-use token bound
to the plan's digest (canonical language, code, stdin, timeout, network,
backend), to the session id when one was given, and to the approving user.
A run presents the token with what it wants to run; the store checks it.
While an approved plan runs, the store links the run to it (:class:`RunUnderWay`),
so whoever approved it can see it run and stop it.
"""

from __future__ import annotations

import dataclasses
import heapq
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ApprovalError, PlanBlocked, PlanNotFound
from .inputs import RunInput
from .records import Check, PlanWarning, RunningPlan
from .request import RunOptions
from .results import RunResult
from .spec import RunSpec, plan_digest

__all__ = [
    "Approval",
    "ExecutionPlan",
    "PlanStore",
    "PlannedRun",
    "RunUnderWay",
    "new_plan_id",
    "plan_digest",
]

#: The ``source`` of plans made through the agent entry points; no other caller may claim it.
AGENT_SOURCE = "agent"
#: The sources a caller may give a plan (``agent`` is set by the agent entry points only).
SOURCES = ("code_block", "cell", "file_run", "chat", "rerun", "api")
#: Sources whose plans wait for someone else's decision (an agent in ``ask`` mode): the
#: plans Pending Plans lists and counts. A cell's, a ▶ Run's or a REST caller's plan is
#: decided by whoever made it, where it was made.
WAITING_SOURCES = (AGENT_SOURCE,)
#: Pending plans kept per identity and kind (agent plans apart): the oldest is evicted.
MAX_PENDING_PLANS = 256
#: Pending plans kept in all; beyond it the oldest plan that is not an agent's goes.
MAX_PENDING_TOTAL = 16 * MAX_PENDING_PLANS  # the default of PlanStore(max_total=)
APPROVAL_TTL_SEC = 300
#: Seconds an undecided plan is kept; then it expires and leaves (an agent waits an hour at most).
PLAN_TTL_SEC = 3600


@dataclass
class ExecutionPlan:
    """What would run (its :class:`RunSpec`), under which rules, and what was decided of it.

    The plan holds the spec it describes: approving the plan lets that very spec run.
    Beside it are the plan's own fields: its id, the digest an approval binds to
    (the spec's for a single run), the checks and warnings, whether it is blocked,
    who made it and when.
    """

    plan_id: str
    goal: str
    source: str
    #: What approving this plan lets run (frozen; the API shows its fields flat).
    spec: RunSpec
    command: list[str]
    checks: list[Check]
    warnings: list[PlanWarning]
    blocked: bool
    requires_approval: bool
    digest: str
    created_at: float
    blocked_reason: str | None = None
    session_id: str | None = None
    #: A batch item's file whose text is already the spec's code: shown as the plan's
    #: ``file``, never sent with the run (the spec has no file then).
    read_from: str | None = None
    #: The identity that made the plan (``None`` under a shared-token login).
    owner: str | None = None
    #: The run of this approved plan while it is under way (set when the run starts).
    run_id: str | None = None

    @property
    def file(self) -> str | None:
        """The file the plan runs or was read from (``None`` for a snippet)."""
        return self.spec.file or self.read_from

    @property
    def waiting(self) -> bool:
        """True when the plan waits for someone else's decision and can get one.

        An agent's plan in ``ask`` mode does; a blocked plan never can, and a cell's,
        a ▶ Run's or a REST caller's plan is decided where it was made.
        """
        return self.source in WAITING_SOURCES and not self.blocked

    @property
    def high_risk(self) -> bool:
        """True when a high-severity warning asks for an explicit human look."""
        return any(w["severity"] == "high" for w in self.warnings)

    def needs_a_look(self, *, confirmed: bool = False) -> bool:
        """True when a person must look at the plan before it runs, so its caller may not
        approve it alone: a high-severity warning the caller did not confirm beforehand
        (``--yes``). The one rule :meth:`SandboxService.plan_and_run` applies on every path.
        """
        return self.high_risk and not confirmed

    def options(self) -> RunOptions:
        """The request this plan answers, as :meth:`~.service.planner.Planner.spec` takes it."""
        spec = self.spec
        return RunOptions(
            language=spec.language,
            code=spec.code,
            file=spec.file,
            filename=spec.filename,
            stdin=spec.stdin,
            timeout_sec=spec.timeout_sec,
            backend=spec.backend,
            allow_network=spec.network,
            env=spec.env,
            session=spec.session,
            source=self.source,
            inputs=tuple(one.given for one in spec.inputs),
        )

    def to_dict(self) -> dict[str, Any]:
        """The plan as the API shows it, its spec's fields flat (stdin is not echoed, the
        limits are the server's); ``session`` names the session a cell runs in (else null)."""
        spec = self.spec
        return {
            "plan_id": self.plan_id,
            "goal": self.goal,
            "source": self.source,
            "language": spec.language,
            "command": self.command,
            "backend": spec.backend,
            "timeout_sec": spec.timeout_sec,
            "network": spec.network,
            "checks": self.checks,
            "warnings": self.warnings,
            "blocked": self.blocked,
            "blocked_reason": self.blocked_reason,
            "requires_approval": self.requires_approval,
            "digest": self.digest,
            "created_at": self.created_at,
            "code": spec.code,
            "file": self.file,
            "env": list(spec.env),
            "inputs": [one.to_dict() for one in spec.inputs],
            "session": spec.session,
            "owner": self.owner,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, spec: RunSpec | None = None) -> ExecutionPlan:
        """Rebuild a plan received as JSON (unknown keys are ignored).

        Its spec is ``spec`` when given (a Dask worker builds its own, with its node's
        limits), else the one the flat fields describe: what the plan shows, with
        the default limits and ``stdin`` only when the data carries it. The digest
        stays the one the planner gave (the server's, over the stdin it was not sent).
        """
        if spec is None:
            spec = RunSpec(
                language=data["language"],
                code=data["code"],
                stdin=data.get("stdin"),
                timeout_sec=data["timeout_sec"],
                network=data["network"],
                backend=data["backend"],
                env=tuple(data.get("env") or ()),
                file=data.get("file"),
                inputs=tuple(RunInput(**one) for one in data.get("inputs") or ()),
                session=data.get("session"),
            )
        own = {k: data[k] for k in _OWN_FIELDS if k in data}
        return cls(spec=spec, **own)


#: The fields of a plan beside its spec, as :meth:`ExecutionPlan.to_dict` shows them.
_OWN_FIELDS = tuple(
    f.name for f in dataclasses.fields(ExecutionPlan) if f.name not in ("spec", "read_from")
)


@dataclass
class PlannedRun:
    """What :meth:`SandboxService.plan_and_run` did: the plan, and its run if it ran.

    ``result`` is ``None`` when the plan needs a person's look
    (:meth:`ExecutionPlan.needs_a_look`): it is kept pending, unrun, for an approval card
    (then the usual approve and run).
    """

    plan: ExecutionPlan
    result: RunResult | None = None

    @property
    def ran(self) -> bool:
        """True when the plan was approved by its caller and run."""
        return self.result is not None

    def to_dict(self) -> dict[str, Any]:
        """``{plan, result}`` as the API answers it (``result`` null for a plan left unrun)."""
        return {
            "plan": self.plan.to_dict(),
            "result": self.result.to_dict() if self.result is not None else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlannedRun:
        """Rebuild the answer of ``POST /api/sandbox/plan-and-run``."""
        result = data.get("result")
        return cls(
            ExecutionPlan.from_dict(data["plan"]),
            RunResult.from_dict(result) if isinstance(result, dict) else None,
        )


@dataclass
class Approval:
    """A minted approval token and what it is bound to."""

    token: str
    plan_id: str
    digest: str
    session_id: str | None
    user: str | None
    expires_at: float
    #: The approved plan (never sent over the wire): its spec is what the token runs,
    #: and its run is linked to it while under way.
    plan: ExecutionPlan = field(repr=False, compare=False)
    approved_by: str = "user"
    used: bool = field(default=False)
    #: The identity that made the plan; only it may run the approval.
    owner: str | None = None

    def to_dict(self, now: float) -> dict[str, Any]:
        """The approve answer."""
        return {
            "approval_token": self.token,
            "plan_id": self.plan_id,
            "expires_in": max(0, round(self.expires_at - now)),
        }


@dataclass
class RunUnderWay:
    """An approved plan whose run is under way: what Pending Plans offers to stop."""

    plan: ExecutionPlan
    run_id: str
    started_at: float
    #: ``user`` (a person approved it) or ``agent`` (an agent in ``auto`` mode).
    approved_by: str
    #: True once someone asked to stop it (the run has not answered yet).
    stopping: bool = False

    def to_dict(self) -> RunningPlan:
        """The ``running`` entry of ``GET /api/sandbox/plans``."""
        return {
            "plan": self.plan.to_dict(),
            "run_id": self.run_id,
            "state": "stopping" if self.stopping else "running",
            "started_at": self.started_at,
            "approved_by": self.approved_by,
        }


def belongs_to(owner: str | None, user: str | None) -> bool:
    """Whether ``user`` may see and use what ``owner`` made (a plan, a session).

    It belongs to the identity that made it. ``None`` on either side is a shared
    principal (jupyter_server's token login, an in-process face): no restriction then.
    """
    return owner is None or user is None or owner == user


def new_plan_id() -> str:
    """``plan_`` + 16 hex characters."""
    return "plan_" + secrets.token_hex(8)


#: Who a pending plan counts against: (the planning identity, whether it is an agent's plan).
_Bucket = tuple[str | None, bool]


class PlanStore:
    """Pending plans and approval tokens. Thread-safe.

    Pending plans are bounded per identity and kind: each user's plans, and apart from
    them each user's agent plans, keep at most ``max_pending`` (oldest evicted), so
    no other traffic can evict a plan an agent waits on, and no client can evict
    another user's plans. ``max_total`` bounds the store; beyond it the oldest plan
    that is not an agent's is evicted. An undecided plan expires after ``plan_ttl_sec``.
    """

    def __init__(
        self,
        *,
        max_pending: int = MAX_PENDING_PLANS,
        max_total: int | None = None,
        ttl_sec: float = APPROVAL_TTL_SEC,
        plan_ttl_sec: float = PLAN_TTL_SEC,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.max_pending = max_pending
        self.max_total = max_total if max_total is not None else max(MAX_PENDING_TOTAL, max_pending)
        self.ttl_sec = ttl_sec
        self.plan_ttl_sec = plan_ttl_sec
        self.clock = clock
        self._plans: OrderedDict[str, ExecutionPlan] = OrderedDict()
        self._bucket_of: dict[str, _Bucket] = {}
        self._buckets: dict[_Bucket, OrderedDict[str, None]] = {}
        self._approvals: OrderedDict[str, Approval] = OrderedDict()
        #: (expires_at, token) of every approval kept, a heap: the next to forget first.
        self._expiry: list[tuple[float, str]] = []
        #: Runs of approved plans under way, by run id, oldest first.
        self._running: OrderedDict[str, RunUnderWay] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, plan: ExecutionPlan, *, owner: str | None = None) -> None:
        """Keep ``plan`` pending for ``owner``; evict the oldest of the same owner and kind."""
        key: _Bucket = (owner, plan.source == AGENT_SOURCE)
        with self._lock:
            self._forget_stale_plans()
            self._plans[plan.plan_id] = plan
            self._bucket_of[plan.plan_id] = key
            bucket = self._buckets.setdefault(key, OrderedDict())
            bucket[plan.plan_id] = None
            while len(bucket) > self.max_pending:
                self._drop(next(iter(bucket)))
            while len(self._plans) > self.max_total:
                victim = next(
                    (pid for pid, (_, agent) in self._bucket_of.items() if not agent),
                    next(iter(self._plans)),
                )
                self._drop(victim)

    def _drop(self, plan_id: str) -> ExecutionPlan | None:
        """Forget a pending plan (lock held)."""
        plan = self._plans.pop(plan_id, None)
        key = self._bucket_of.pop(plan_id, None)
        if key is not None:
            bucket = self._buckets[key]
            bucket.pop(plan_id, None)
            if not bucket:
                del self._buckets[key]
        return plan

    def get(self, plan_id: str) -> ExecutionPlan:
        """A pending plan, or :class:`PlanNotFound`."""
        with self._lock:
            self._forget_stale_plans()
            plan = self._plans.get(plan_id)
        if plan is None:
            raise PlanNotFound(
                f"no pending plan {plan_id!r} (unknown, expired or already approved)"
            )
        return plan

    def pending(self) -> list[ExecutionPlan]:
        """Every undecided, unexpired plan, oldest first (whoever decides it)."""
        with self._lock:
            self._forget_stale_plans()
            return list(self._plans.values())

    def waiting(self, session_id: str | None = None) -> list[ExecutionPlan]:
        """The plans waiting for someone else's decision (:attr:`ExecutionPlan.waiting`).

        What Pending Plans lists and the status counts; ``session_id`` keeps one session's.
        """
        return [
            plan
            for plan in self.pending()
            if plan.waiting and (session_id is None or plan.session_id == session_id)
        ]

    def reject(self, plan_id: str) -> ExecutionPlan:
        """Drop a pending plan unapproved (a human said no); :class:`PlanNotFound` if gone."""
        with self._lock:
            plan = self._drop(plan_id)
        if plan is None:
            raise PlanNotFound(f"no pending plan {plan_id!r} (unknown, evicted or already decided)")
        return plan

    def approval_for(self, plan_id: str) -> Approval | None:
        """The live (unused, unexpired) approval minted for ``plan_id``, if any."""
        with self._lock:
            now = self.clock()
            for approval in reversed(self._approvals.values()):
                if approval.plan_id == plan_id and not approval.used and now < approval.expires_at:
                    return approval
        return None

    def approve(
        self,
        plan_id: str,
        *,
        session_id: str | None = None,
        user: str | None = None,
        approved_by: str = "user",
    ) -> Approval:
        """Consume a pending plan and mint its single-use token."""
        with self._lock:
            self._forget_stale_plans()
            plan = self._plans.get(plan_id)
            if plan is None:
                raise PlanNotFound(
                    f"no pending plan {plan_id!r} (unknown, evicted, expired or already approved)"
                )
            if plan.blocked:
                raise PlanBlocked(
                    f"plan {plan_id} is blocked and can never be approved: {plan.blocked_reason}"
                )
            self._drop(plan_id)
            now = self.clock()
            self._forget_expired(now)
            approval = Approval(
                token=secrets.token_urlsafe(32),
                plan_id=plan_id,
                digest=plan.digest,
                session_id=session_id if session_id is not None else plan.session_id,
                user=user,
                expires_at=now + self.ttl_sec,
                approved_by=approved_by,
                owner=plan.owner,
                plan=plan,
            )
            self._approvals[approval.token] = approval
            heapq.heappush(self._expiry, (approval.expires_at, approval.token))
            return approval

    def redeem(
        self,
        token: object,
        *,
        digest: str | None,
        session_id: str | None = None,
        user: str | None = None,
    ) -> Approval:
        """Check ``token`` against what is about to run and spend it.

        ``digest`` is what the caller asked to run (the long form of a run); ``None``
        runs whatever was approved (a run by token alone). A mismatch of what runs
        leaves the token unspent; every refusal has its own code.
        """
        if not token:
            raise ApprovalError(
                "this run needs an approval: POST /api/sandbox/plan, then /approve, "
                "and send the approval_token with the run",
                code="approval_required",
            )
        with self._lock:
            approval = self._approvals.get(str(token))
            now = self.clock()
            if approval is None:
                raise ApprovalError("unknown approval token", code="approval_unknown")
            if approval.used:
                raise ApprovalError("this approval token was already used", code="approval_used")
            if now >= approval.expires_at:
                raise ApprovalError(
                    "this approval token has expired; plan and approve again",
                    code="approval_expired",
                )
            if approval.session_id is not None and approval.session_id != session_id:
                raise ApprovalError(
                    "this approval token belongs to another session", code="approval_session"
                )
            if approval.user is not None and user is not None and approval.user != user:
                raise ApprovalError(
                    "this approval token was granted to another user", code="approval_session"
                )
            if digest is not None and approval.digest != digest:
                raise ApprovalError(
                    "what you asked to run differs from the approved plan (code, language, "
                    "stdin, timeout, network, backend or inputs); the token was not spent",
                    code="approval_mismatch",
                )
            approval.used = True
            return approval

    def unspend(self, approval: Approval) -> None:
        """Give a spent token back: the run it was spent on was refused before it started.

        It stays bound to what it was bound to and expires when it would have.
        """
        with self._lock:
            if self._approvals.get(approval.token) is approval:
                approval.used = False

    # -- runs of approved plans -----------------------------------------------------

    def run_started(self, plan: ExecutionPlan, run_id: str, *, approved_by: str) -> None:
        """Link a run that has just started to the approved ``plan`` it runs."""
        with self._lock:
            plan.run_id = run_id
            self._running[run_id] = RunUnderWay(
                plan=plan, run_id=run_id, started_at=self.clock(), approved_by=approved_by
            )

    def run_stopping(self, run_id: str) -> None:
        """Note that someone asked the run ``run_id`` to stop (no-op for an unlinked run)."""
        with self._lock:
            running = self._running.get(run_id)
            if running is not None:
                running.stopping = True

    def run_ended(self, run_id: str) -> None:
        """The run ``run_id`` is over: its plan leaves the running list."""
        with self._lock:
            running = self._running.pop(run_id, None)
            if running is not None:
                running.plan.run_id = None

    def running(self, session_id: str | None = None) -> list[RunUnderWay]:
        """Runs under way of plans that waited for someone else's decision, oldest first.

        The counterpart of :meth:`waiting` once such a plan is approved and run (an
        agent's plan): Pending Plans shows them apart, with Stop. ``session_id``
        keeps one session's.
        """
        with self._lock:
            return [
                running
                for running in self._running.values()
                if running.plan.source in WAITING_SOURCES
                and (session_id is None or running.plan.session_id == session_id)
            ]

    def _forget_stale_plans(self) -> None:
        # Called with the lock held: undecided plans past their time leave the store.
        cutoff = self.clock() - self.plan_ttl_sec
        for plan_id in [p for p, plan in self._plans.items() if plan.created_at < cutoff]:
            self._drop(plan_id)

    def _forget_expired(self, now: float) -> None:
        # Used tokens are kept until they expire so a replay says "used", not "unknown".
        # Those past it are at the top of the heap: no look at the others (a busy kernel
        # keeps ten minutes of approvals).
        while self._expiry and self._expiry[0][0] + self.ttl_sec < now:
            _, token = heapq.heappop(self._expiry)
            del self._approvals[token]
