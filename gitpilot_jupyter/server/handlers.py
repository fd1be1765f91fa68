"""REST handlers: status, config, plan, plans, approve. One small class per resource.

GET asks the authorizer for ``read``, PUT for ``write``, and every POST for
``execute`` (planning, approving and running all lead to code execution).
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..sandbox.request import RunOptions
from .base import SandboxHandler, authorized_execute


class StatusHandler(SandboxHandler):
    """``GET /api/sandbox/status``."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Live backend, masked settings, health, env override, approval, isolation."""
        self.write_json(await self.call(self.service.status()))


class ConfigHandler(SandboxHandler):
    """``GET|PUT /api/sandbox/config``."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """The effective settings, masked."""
        self.write_json(self.service.config())

    @web.authenticated
    @authorized
    async def put(self) -> None:
        """Persist any subset of the settings; answer the new status."""
        changes = self.body("SettingsUpdate")
        confirm = changes.pop("confirm", False) is True
        self.write_json(
            await self.call(self.service.configure(changes, user=self.username, confirm=confirm))
        )


class PlanHandler(SandboxHandler):
    """``POST /api/sandbox/plan``: a snippet or a file under the server's root."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Plan and keep the plan pending for approval."""
        body = self.body("PlanRequest")
        self.check_not_hidden(body.get("file"))
        caller = self.caller(body.get("session_id"))
        plan = await self.call(self.service.plan(RunOptions.from_body(body), caller))
        self.write_json({"plan": plan.to_dict()})


class PlansHandler(SandboxHandler):
    """``GET /api/sandbox/plans``: what waits for someone else's decision (Pending Plans)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Waiting plans the caller may see, oldest first; ``?session_id=`` keeps one session's.

        The same rule the status counts as ``waiting_plans``: an agent's plans in ``ask``
        mode that can still be approved; not cells', ▶ Run's or REST callers' own plans.
        ``running`` lists such plans once approved while their run is under way (with the
        run id that ``DELETE /runs/{run_id}`` stops); they are no longer waiting.
        """
        session_id = self.get_query_argument("session_id", None)
        pending = await self.call(self.service.pending(self.caller(session_id)))
        running = await self.call(self.service.running(self.caller(session_id)))
        self.write_json(
            {
                "plans": [plan.to_dict() for plan in pending],
                "running": [run.to_dict() for run in running],
            }
        )


class ApproveHandler(SandboxHandler):
    """``POST /api/sandbox/approve``."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Approve a pending plan; answer its single-use token."""
        body = self.body("ApproveRequest")
        approval = await self.call(
            self.service.approve(body["plan_id"], self.caller(body.get("session_id")))
        )
        self.write_json(approval)
