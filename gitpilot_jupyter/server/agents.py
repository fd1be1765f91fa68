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

from tornado import web

from ..sandbox.request import RunOptions
from .base import SandboxHandler, authorized_execute


class AgentPlanHandler(SandboxHandler):
    """``POST /api/sandbox/agent/plan``."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Plan an agent's snippet; answer the plan and its claim secret (or its token)."""
        body = self.body("AgentPlanRequest")
        auto = bool(body.pop("approve", False))
        ticket = await self.call(
            self.service.plan_for_agent(
                RunOptions.from_body(body),
                self.caller(body.get("session_id")),
                auto_approve=auto,
            )
        )
        self.write_json(ticket.to_dict())


class AgentClaimHandler(SandboxHandler):
    """``POST /api/sandbox/agent/claim``."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """``pending``, or ``approved`` with the approval token (handed over once)."""
        body = self.body("AgentClaimRequest")
        answer = await self.call(self.service.claim(body["plan_id"], body["claim"], self.caller()))
        self.write_json(answer.to_dict())


class RejectHandler(SandboxHandler):
    """``POST /api/sandbox/reject``."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Drop a pending plan unapproved; an agent waiting for it learns it was not approved."""
        body = self.body("RejectRequest")
        plan = await self.call(self.service.reject(body["plan_id"], self.caller()))
        self.write_json({"plan_id": plan.plan_id, "rejected": True})


def agent_handlers(api: str) -> list[tuple[str, type[SandboxHandler]]]:
    """The routes of this module under ``api`` (``/api/sandbox``)."""
    return [
        (f"{api}/agent/plan", AgentPlanHandler),
        (f"{api}/agent/claim", AgentClaimHandler),
        (f"{api}/reject", RejectHandler),
    ]
