"""Claims: how a planner learns, safely, that a human approved its plan.

An agent in ``ask`` mode plans, then waits while a human approves the plan
somewhere else (JupyterLab, a notebook, the CLI). At plan time the planner gets
a claim secret that nobody else sees; once the plan is approved, presenting the
secret hands over the plan's approval token exactly once. The approver's own
answer is unchanged, and the token never travels to anyone who did not plan
or approve. Only a hash of the secret is kept.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
from dataclasses import dataclass
from typing import Any

from .errors import ApprovalError, PlanNotFound
from .plans import ExecutionPlan, PlanStore


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ClaimAnswer:
    """``pending`` (no token yet) or ``approved`` with the single-use token."""

    state: str
    approval_token: str | None = None
    expires_in: int | None = None

    def to_dict(self) -> dict[str, object]:
        """The JSON answer of the claim endpoint."""
        data: dict[str, object] = {"state": self.state}
        if self.approval_token is not None:
            data["approval_token"] = self.approval_token
            data["expires_in"] = self.expires_in
        return data


@dataclass
class AgentPlan:
    """An agent's plan, plus what only its planner holds.

    ``claim`` (``ask`` mode) collects the token once a human approves;
    ``approval_token`` (``auto`` mode) is the agent's own approval. A blocked
    plan has neither.
    """

    plan: ExecutionPlan
    claim: str | None = None
    approval_token: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The answer of ``POST /api/sandbox/agent/plan``."""
        answer: dict[str, Any] = {"plan": self.plan.to_dict()}
        if self.claim is not None:
            answer["claim"] = self.claim
        if self.approval_token is not None:
            answer["approval_token"] = self.approval_token
        return answer


class ClaimStore:
    """Claim secrets of one :class:`PlanStore` (at most one per plan). Thread-safe."""

    def __init__(self, plans: PlanStore) -> None:
        self.plans = plans
        self._hashes: dict[str, str] = {}
        self._lock = threading.Lock()

    def open(self, plan_id: str) -> str:
        """A fresh claim secret for a pending plan; an older secret for it stops working."""
        self.plans.get(plan_id)  # PlanNotFound when it is not pending
        secret = secrets.token_urlsafe(32)
        with self._lock:
            self._forget_decided()
            self._hashes[plan_id] = _hash(secret)
        return secret

    def claim(self, plan_id: str, secret: str) -> ClaimAnswer:
        """``pending`` while the plan waits; its token once approved (only once).

        A wrong secret is :class:`ApprovalError` ``claim_invalid``; a plan that was
        rejected, evicted, or whose approval expired or was spent is :class:`PlanNotFound`.
        """
        with self._lock:
            expected = self._hashes.get(plan_id)
            if expected is None or not hmac.compare_digest(expected, _hash(str(secret))):
                raise ApprovalError("unknown plan id or wrong claim secret", code="claim_invalid")
            try:
                self.plans.get(plan_id)
                return ClaimAnswer("pending")
            except PlanNotFound:
                del self._hashes[plan_id]
        approval = self.plans.approval_for(plan_id)
        if approval is None:
            raise PlanNotFound(
                f"plan {plan_id} was rejected or evicted, or its approval expired or was used"
            )
        now = self.plans.clock()
        return ClaimAnswer("approved", approval.token, max(0, round(approval.expires_at - now)))

    def _forget_decided(self) -> None:
        # Keep memory bounded: drop secrets whose plan is neither pending nor approved.
        if len(self._hashes) <= self.plans.max_pending:
            return
        pending = {p.plan_id for p in self.plans.pending()}
        for plan_id in list(self._hashes):
            if plan_id not in pending and self.plans.approval_for(plan_id) is None:
                del self._hashes[plan_id]
