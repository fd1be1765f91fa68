"""The kernel's way to the sandbox: what every client offers, and the in-process one.

Two clients implement :class:`SandboxClient`: :class:`LocalClient` (the core in
the kernel process) and :class:`~.rest.RestClient` (the REST API of a Jupyter
server). Both give the same plans and envelopes and raise the same typed errors
(:class:`~gitpilot_jupyter.sandbox.errors.SandboxError` with the core's ``code``),
so the magic and the widgets never care which path runs;
:func:`~.resolve.make_client` picks one.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..sandbox.backend import OutputCallback
from ..sandbox.errors import SandboxError
from ..sandbox.plans import ExecutionPlan
from ..sandbox.results import RunResult
from ..sandbox.service import SandboxService

LIFECYCLE_ACTIONS = ("status", "install", "start", "stop")

#: Receives install's pull progress events (``{"image", "status", ...}``).
ProgressCallback = Callable[[dict[str, Any]], Awaitable[None]]


class SandboxClient(abc.ABC):
    """Plan, approve and run snippets, read and change settings, manage MatrixLab."""

    #: Which path runs, as the footer names it.
    path: str = ""

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id or "kernel-" + uuid.uuid4().hex[:12]

    @abc.abstractmethod
    async def plan(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        stdin: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        env: Sequence[str] | None = None,
    ) -> ExecutionPlan:
        """Plan a notebook cell's snippet (``env``: server variables passed by name)."""

    @abc.abstractmethod
    async def approve(self, plan: ExecutionPlan, *, approved_by: str = "user") -> str | None:
        """Approve ``plan``; the approval token (``None`` when the service needs none)."""

    @abc.abstractmethod
    async def run(
        self,
        plan: ExecutionPlan,
        *,
        token: str | None,
        stdin: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        """Run an approved plan, streaming its output to ``on_output``."""

    @abc.abstractmethod
    async def pending(self) -> list[ExecutionPlan]:
        """Plans waiting for a person's approval where this client reaches, oldest first."""

    @abc.abstractmethod
    async def approve_for_planner(self, plan_id: str) -> None:
        """Approve a plan someone else made (an agent) without taking its token.

        The planner collects the token with its claim secret and runs the plan
        itself; the approver neither runs it nor sees the token.
        """

    @abc.abstractmethod
    async def reject(self, plan_id: str) -> None:
        """Drop a pending plan unapproved: it never runs and a waiting planner learns so."""

    @abc.abstractmethod
    async def status(self) -> dict[str, Any]:
        """The service status (backend, masked settings, health, env override...)."""

    @abc.abstractmethod
    async def configure(self, changes: Mapping[str, object]) -> dict[str, Any]:
        """Persist a subset of settings; answer the new status."""

    @abc.abstractmethod
    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """Test connection to a MatrixLab Runner (unsaved url / token allowed)."""

    @abc.abstractmethod
    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        """``status`` (inspection) or ``install`` / ``start`` / ``stop`` of the Runner.

        ``progress`` receives install's pull events where the path can deliver them.
        """

    async def run_approved(
        self, plan: ExecutionPlan, *, stdin: str | None, on_output: OutputCallback | None
    ) -> RunResult:
        """Approve (the cell's execution is the approval) and run."""
        token = await self.approve(plan, approved_by="cell")
        return await self.run(plan, token=token, stdin=stdin, on_output=on_output)


class LocalClient(SandboxClient):
    """The core in the kernel process."""

    path = "in-process"

    def __init__(self, service: SandboxService | None = None, session_id: str | None = None):
        super().__init__(session_id)
        self.service = service or SandboxService(root_dir=Path.cwd())

    async def plan(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        stdin: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        env: Sequence[str] | None = None,
    ) -> ExecutionPlan:
        return await self.service.plan(
            language=language,
            code=code,
            source="cell",
            timeout_sec=timeout_sec,
            stdin=stdin,
            session_id=self.session_id,
            backend=backend,
            allow_network=allow_network,
            env=env,
        )

    async def approve(self, plan: ExecutionPlan, *, approved_by: str = "user") -> str | None:
        if not plan.requires_approval:
            return None
        answer = await self.service.approve(
            plan.plan_id, session_id=self.session_id, approved_by=approved_by
        )
        return str(answer["approval_token"])

    async def run(
        self,
        plan: ExecutionPlan,
        *,
        token: str | None,
        stdin: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        return await self.service.run(
            language=plan.language,
            code=plan.code,
            timeout_sec=plan.timeout_sec,
            stdin=stdin,
            approval_token=token,
            session_id=self.session_id,
            backend=plan.backend,
            allow_network=plan.network,
            on_output=on_output,
            env=plan.env,
        )

    async def pending(self) -> list[ExecutionPlan]:
        return self.service.plans.pending()

    async def approve_for_planner(self, plan_id: str) -> None:
        # Not bound to this kernel's session: the planner runs it, from its own.
        await self.service.approve(plan_id, approved_by="user")

    async def reject(self, plan_id: str) -> None:
        self.service.plans.reject(plan_id)

    async def status(self) -> dict[str, Any]:
        return await self.service.status()

    async def configure(self, changes: Mapping[str, object]) -> dict[str, Any]:
        return await self.service.configure(changes, user="kernel")

    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        return await self.service.test_matrixlab(url=url, token=token)

    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        if action not in LIFECYCLE_ACTIONS:
            raise SandboxError(f"unknown lifecycle action {action!r}", code="invalid_request")
        if action == "status":
            return await self.service.lifecycle_status()
        if action == "install":
            return await self.service.lifecycle_install(progress, user="kernel")
        if action == "start":
            return await self.service.lifecycle_start(user="kernel")
        return await self.service.lifecycle_stop(user="kernel")
