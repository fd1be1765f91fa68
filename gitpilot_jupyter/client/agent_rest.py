"""The sandbox of a running Jupyter server, over its REST API.

Plans made here land in the server's one PlanStore, where JupyterLab, a
notebook (``%sandbox plans``) or ``jupyter sandbox approve`` can approve them.
Which server, and how calls to it fail, is :mod:`.server`'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..sandbox.claims import ClaimAnswer
from ..sandbox.results import RunResult
from .agent_local import PlanTicket
from .server import ServerInfo, call_api

#: Seconds to wait for a server to answer a plan/approve/status call.
REQUEST_TIMEOUT = 10.0
#: A run may last the longest snippet timeout plus the time to start and report.
RUN_TIMEOUT = 660.0


class RemoteAccess:
    """The sandbox REST API of one Jupyter server (a fresh HTTP client per call)."""

    in_process = False

    def __init__(self, server: ServerInfo) -> None:
        self.server = server
        self.where = self.server.url

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> Any:
        return await call_api(self.server, method, path, body, timeout=timeout)

    async def plan(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None,
        auto_approve: bool,
        env: Sequence[str] | None = None,
    ) -> PlanTicket:
        """``POST /api/sandbox/agent/plan``."""
        body: dict[str, Any] = {"language": language, "code": code, "approve": auto_approve}
        if timeout_sec is not None:
            body["timeout_sec"] = timeout_sec
        if env:
            body["env"] = list(env)
        data = await self._call("POST", "agent/plan", body)
        return PlanTicket(data["plan"], data.get("claim"), data.get("approval_token"))

    async def claim(self, plan_id: str, secret: str) -> ClaimAnswer:
        """``POST /api/sandbox/agent/claim``."""
        data = await self._call("POST", "agent/claim", {"plan_id": plan_id, "claim": secret})
        return ClaimAnswer(data["state"], data.get("approval_token"), data.get("expires_in"))

    async def run(self, plan: dict[str, Any], approval_token: str | None) -> RunResult:
        """``POST /api/sandbox/run``: the endpoint the human's Run button uses."""
        body = {
            "language": plan["language"],
            "code": plan["code"],
            "timeout_sec": plan["timeout_sec"],
            "approval_token": approval_token,
            "backend": plan["backend"],
            "allow_network": plan["network"],
        }
        if plan.get("env"):
            body["env"] = list(plan["env"])
        return RunResult.from_dict(await self._call("POST", "run", body, timeout=RUN_TIMEOUT))

    async def approve(self, plan_id: str) -> dict[str, Any]:
        """``POST /api/sandbox/approve``."""
        data: dict[str, Any] = await self._call("POST", "approve", {"plan_id": plan_id})
        return data

    async def reject(self, plan_id: str) -> None:
        """``POST /api/sandbox/reject``."""
        await self._call("POST", "reject", {"plan_id": plan_id})

    async def pending(self) -> list[dict[str, Any]]:
        """``GET /api/sandbox/plans``."""
        data = await self._call("GET", "plans")
        plans: list[dict[str, Any]] = data["plans"]
        return plans

    async def status(self) -> dict[str, Any]:
        """``GET /api/sandbox/status``."""
        data: dict[str, Any] = await self._call("GET", "status")
        return data
