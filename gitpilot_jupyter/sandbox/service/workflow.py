"""The plan workflow: keeping plans with their owner, pending, approve, reject, agents' claims.

A part of :class:`~gitpilot_jupyter.sandbox.service.service.SandboxService` (held, not
inherited). It is the only user of the plan and claim stores; each decision
emits its audit event. A plan belongs to the identity that made it: someone
else's plan is answered as an unknown one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..claims import AgentPlan, ClaimAnswer, ClaimStore
from ..errors import NotPlanOwner, PlanNotFound
from ..plans import Approval, ExecutionPlan, PlanStore, RunUnderWay, belongs_to

#: Receives ``(event_name, data)`` for every plan, approval, run, refusal and config change.
AuditHook = Callable[[str, dict[str, Any]], None]


def not_found(plan_id: str) -> PlanNotFound:
    """The answer for an unknown plan, and for someone else's (its existence is not disclosed)."""
    return PlanNotFound(f"no pending plan {plan_id!r} (unknown, expired or already approved)")


def check_owner(owner: str | None, user: str | None) -> None:
    """:class:`NotPlanOwner` when ``user`` is not the identity that made the plan."""
    if owner is not None and user is not None and owner != user:
        raise NotPlanOwner("this approval is for a plan someone else made")


def visible(plan: ExecutionPlan, user: str | None) -> bool:
    """Whether ``user`` may see and decide ``plan`` (:func:`~..plans.belongs_to`)."""
    return belongs_to(plan.owner, user)


class PlanWorkflow:
    """Plans kept for approval, their owners, decisions and the agents' claims."""

    def __init__(self, plans: PlanStore, emit: AuditHook) -> None:
        self.plans = plans
        #: Lets a planner (an agent in ``ask`` mode) collect the token once a human approves.
        self.claims = ClaimStore(plans)
        self._emit = emit

    def keep(self, plan: ExecutionPlan, *, user: str | None) -> None:
        """Keep ``plan`` pending, owned by ``user``; audit it."""
        plan.owner = user
        self.plans.add(plan, owner=user)
        self._emit(
            "plan",
            {
                "user": user,
                "plan_id": plan.plan_id,
                "digest": plan.digest,
                "language": plan.spec.language,
                "backend": plan.spec.backend,
                "blocked": plan.blocked,
                "source": plan.source,
            },
        )

    def pending_plan(self, plan_id: str, user: str | None) -> ExecutionPlan:
        """A pending plan ``user`` may decide; someone else's is as unknown as a missing one."""
        plan = self.plans.get(plan_id)
        if not visible(plan, user):
            raise not_found(plan_id)
        return plan

    def pending(self, *, user: str | None, session_id: str | None) -> list[ExecutionPlan]:
        """Plans waiting for a decision that ``user`` may see, oldest first."""
        return [plan for plan in self.plans.waiting(session_id) if visible(plan, user)]

    def running(self, *, user: str | None, session_id: str | None) -> list[RunUnderWay]:
        """Approved plans of the :meth:`pending` kind whose run is under way, oldest first."""
        return [run for run in self.plans.running(session_id) if visible(run.plan, user)]

    def approve(
        self, plan_id: str, *, session_id: str | None, user: str | None, approved_by: str
    ) -> dict[str, Any]:
        """Approve a pending plan: ``{approval_token, plan_id, expires_in}``."""
        plan = self.pending_plan(plan_id, user)
        approval = self.plans.approve(
            plan_id, session_id=session_id, user=user, approved_by=approved_by
        )
        self._emit(
            "approve",
            {
                "user": user,
                "plan_id": plan_id,
                "digest": plan.digest,
                "language": plan.spec.language,
                "backend": plan.spec.backend,
                "approved_by": approved_by,
            },
        )
        return approval.to_dict(self.plans.clock())

    def reject(self, plan_id: str, *, user: str | None) -> ExecutionPlan:
        """Drop a pending plan unapproved: it never runs; a waiting planner learns so."""
        self.pending_plan(plan_id, user)
        plan = self.plans.reject(plan_id)
        self._emit(
            "reject",
            {
                "user": user,
                "plan_id": plan_id,
                "digest": plan.digest,
                "language": plan.spec.language,
                "backend": plan.spec.backend,
                "source": plan.source,
            },
        )
        return plan

    def redeem(
        self,
        approval_token: str | None,
        *,
        digest: str | None,
        session_id: str | None,
        user: str | None,
    ) -> Approval:
        """Spend an approval token on a run of ``digest`` (any when ``None``) by its owner."""
        approval = self.plans.redeem(
            approval_token, digest=digest, session_id=session_id, user=user
        )
        check_owner(approval.owner, user)
        return approval

    def agent_ticket(
        self,
        plan: ExecutionPlan,
        *,
        auto_approve: bool,
        session_id: str | None,
        user: str | None,
    ) -> AgentPlan:
        """An agent's kept plan with its token (``auto_approve``) or a claim secret.

        A blocked plan gets neither.
        """
        ticket = AgentPlan(plan)
        if plan.blocked:
            return ticket
        if auto_approve:
            approval = self.approve(
                plan.plan_id, session_id=session_id, user=user, approved_by="agent"
            )
            ticket.approval_token = str(approval["approval_token"])
        else:
            ticket.claim = self.claims.open(plan.plan_id)
        return ticket

    def claim(self, plan_id: str, secret: str, *, user: str | None) -> ClaimAnswer:
        """``pending``, or ``approved`` with the token (handed over once; audited)."""
        try:
            plan: ExecutionPlan | None = self.plans.get(plan_id)
        except PlanNotFound:
            plan = None
        if plan is not None and not visible(plan, user):
            raise not_found(plan_id)
        if plan is None:  # decided: only its owner may collect the token (checked first)
            approval = self.plans.approval_for(plan_id)
            if approval is not None:
                check_owner(approval.owner, user)
        answer = self.claims.claim(plan_id, secret)
        if answer.state == "approved":
            self._emit("claim", {"user": user, "plan_id": plan_id, "state": answer.state})
        return answer
