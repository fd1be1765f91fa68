"""REST routes for agents: plan with a claim secret, claim the approval, reject a plan.

An agent in ``ask`` mode plans through ``/api/sandbox/agent/plan`` and gets,
besides the plan, a claim secret only it holds. A person approves the plan
through the usual ``/api/sandbox/approve`` (JupyterLab, a notebook, the CLI);
the agent then collects the single-use token with ``/api/sandbox/agent/claim``
and runs through ``/api/sandbox/run``, the endpoint the ▶ Run button uses.
In ``auto`` mode (``"approve": true``) the agent approves its own plan and the
audit event records ``approved_by: "agent"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tornado import web

from ..sandbox.errors import SandboxError
from .base import SandboxHandler, authorized_execute, http_error

T = TypeVar("T")


def _core(action: Callable[[], T]) -> T:
    """Run a synchronous core call; its typed errors become HTTP errors."""
    try:
        return action()
    except SandboxError as exc:
        raise http_error(exc) from None


class AgentPlanHandler(SandboxHandler):
    """``POST /api/sandbox/agent/plan``."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Plan an agent's snippet; answer the plan and its claim secret (or its token)."""
        body = self.body("AgentPlanRequest")
        auto = bool(body.pop("approve", False))
        plan = await self.call(self.service.plan(**body, agent=True, user=self.username))
        answer: dict[str, Any] = {"plan": plan.to_dict()}
        if plan.blocked:
            pass  # never approvable: no claim, no token
        elif auto:
            approval = await self.call(
                self.service.approve(
                    plan.plan_id,
                    session_id=body.get("session_id"),
                    user=self.username,
                    approved_by="agent",
                )
            )
            answer["approval_token"] = approval["approval_token"]
        else:
            answer["claim"] = _core(lambda: self.service.claims.open(plan.plan_id))
        self.write_json(answer)


class AgentClaimHandler(SandboxHandler):
    """``POST /api/sandbox/agent/claim``."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """``pending``, or ``approved`` with the approval token (handed over once)."""
        body = self.body("AgentClaimRequest")
        answer = _core(lambda: self.service.claims.claim(body["plan_id"], body["claim"]))
        self.write_json(answer.to_dict())


class RejectHandler(SandboxHandler):
    """``POST /api/sandbox/reject``."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Drop a pending plan unapproved; an agent waiting for it learns it was not approved."""
        body = self.body("RejectRequest")
        plan = _core(lambda: self.service.plans.reject(body["plan_id"]))
        self.write_json({"plan_id": plan.plan_id, "rejected": True})


def agent_handlers(api: str) -> list[tuple[str, type[SandboxHandler]]]:
    """The routes of this module under ``api`` (``/api/sandbox``)."""
    return [
        (f"{api}/agent/plan", AgentPlanHandler),
        (f"{api}/agent/claim", AgentClaimHandler),
        (f"{api}/reject", RejectHandler),
    ]
