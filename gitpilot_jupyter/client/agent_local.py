"""How an agent reaches the sandbox: the same plan -> approve -> run path as every face.

:class:`LocalAccess` drives a :class:`SandboxService` in this process (the
Jupyter server's own service when the agent lives in the server, e.g. Jupyter
AI; else a private one). :class:`~.agent_rest.RemoteAccess` goes through a Jupyter
server's REST API, so plans land where JupyterLab and notebooks can approve them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ..sandbox.claims import ClaimAnswer
from ..sandbox.results import RunResult
from ..sandbox.service import SandboxService

#: ``user`` recorded in audit events for in-process agent plans.
AGENT_USER = "agent"


@dataclass
class PlanTicket:
    """A plan as the API shows it, plus what only its planner holds.

    ``claim`` (``ask`` mode) collects the token once a human approves;
    ``approval_token`` (``auto`` mode) is the agent's own approval.
    """

    plan: dict[str, Any]
    claim: str | None = None
    approval_token: str | None = None

    @property
    def plan_id(self) -> str:
        """The plan's id."""
        return str(self.plan["plan_id"])


class SandboxAccess(Protocol):
    """What the agent tools need from the sandbox, in process or over REST."""

    #: ``in-process`` or the Jupyter server's URL.
    where: str

    @property
    def in_process(self) -> bool:
        """True when plans live in this process only."""

    async def plan(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None,
        auto_approve: bool,
        env: Sequence[str] | None = None,
    ) -> PlanTicket:
        """Plan (and with ``auto_approve``, approve as the agent) one snippet."""

    async def claim(self, plan_id: str, secret: str) -> ClaimAnswer:
        """``pending``, or ``approved`` with the token once a human approved."""

    async def run(self, plan: dict[str, Any], approval_token: str | None) -> RunResult:
        """Run exactly what the plan describes."""

    async def approve(self, plan_id: str) -> dict[str, Any]:
        """Approve as a person (CLI, host application)."""

    async def reject(self, plan_id: str) -> None:
        """Drop a pending plan unapproved."""

    async def pending(self) -> list[dict[str, Any]]:
        """Plans waiting for approval, oldest first."""

    async def status(self) -> dict[str, Any]:
        """The sandbox status."""


class LocalAccess:
    """The service in this process."""

    where = "in-process"

    def __init__(self, service: SandboxService, *, shared: bool = False) -> None:
        self.service = service
        #: True for a service others can see (the Jupyter server's): plans are approvable there.
        self.shared = shared

    @property
    def in_process(self) -> bool:
        """Plans of a private service can only be approved by this process."""
        return not self.shared

    async def plan(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None,
        auto_approve: bool,
        env: Sequence[str] | None = None,
    ) -> PlanTicket:
        """Plan; in ``auto`` approve as the agent, else open a claim for the human's approval."""
        plan = await self.service.plan(
            language=language,
            code=code,
            timeout_sec=timeout_sec,
            agent=True,
            user=AGENT_USER,
            env=env,
        )
        ticket = PlanTicket(plan.to_dict())
        if plan.blocked:
            return ticket
        if auto_approve:
            approval = await self.service.approve(plan.plan_id, approved_by="agent")
            ticket.approval_token = approval["approval_token"]
        else:
            ticket.claim = self.service.claims.open(plan.plan_id)
        return ticket

    async def claim(self, plan_id: str, secret: str) -> ClaimAnswer:
        """Ask the claim store."""
        return self.service.claims.claim(plan_id, secret)

    async def run(self, plan: dict[str, Any], approval_token: str | None) -> RunResult:
        """Run through the service's approval gate (user left open: the approver may differ)."""
        return await self.service.run(
            language=plan["language"],
            code=plan["code"],
            timeout_sec=plan["timeout_sec"],
            approval_token=approval_token,
            backend=plan["backend"],
            allow_network=plan["network"],
            env=plan.get("env") or None,
        )

    async def approve(self, plan_id: str) -> dict[str, Any]:
        """Approve as the person driving this process."""
        return await self.service.approve(plan_id, approved_by="user")

    async def reject(self, plan_id: str) -> None:
        """Drop the plan."""
        self.service.plans.reject(plan_id)

    async def pending(self) -> list[dict[str, Any]]:
        """Pending plans of this process's service."""
        return [plan.to_dict() for plan in self.service.plans.pending()]

    async def status(self) -> dict[str, Any]:
        """The service's status."""
        return await self.service.status()
