"""The in-process client: a :class:`SandboxService` in this process."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..sandbox.backend import OutputCallback
from ..sandbox.batch import BatchItem, BatchPlan, BatchService, ClusterAccess
from ..sandbox.batch.runner import BatchWatch
from ..sandbox.claims import AgentPlan, ClaimAnswer
from ..sandbox.local.pool import PoolConfig
from ..sandbox.plans import ExecutionPlan, PlannedRun
from ..sandbox.records import Status
from ..sandbox.request import NO_OPTIONS, Caller, RunOptions
from ..sandbox.results import RunResult
from ..sandbox.service import SandboxService
from .base import LIFECYCLE_ACTIONS, ProgressCallback, SandboxClient

__all__ = ["LIFECYCLE_ACTIONS", "LocalClient", "SandboxClient"]


class LocalClient(SandboxClient):
    """The core in this process.

    ``shared``: the service is one others see too (the Jupyter server's own, for an
    agent living in the server): plans made here are approvable there.
    ``user``: the name recorded in audit events for calls through this client.
    ``pool``: the warm pool of the service made here (default: from the environment).
    """

    path = "in-process"
    where = "in-process"

    def __init__(
        self,
        service: SandboxService | None = None,
        session_id: str | None = None,
        *,
        shared: bool = False,
        user: str | None = "kernel",
        pool: PoolConfig | None = None,
    ) -> None:
        super().__init__(session_id)
        self.service = service or SandboxService(root_dir=Path.cwd(), pool=pool)
        self.shared = shared
        self.user = user

    @property
    def in_process(self) -> bool:
        """Plans of a private service can only be approved by this process."""
        return not self.shared

    @property
    def caller(self) -> Caller:
        """Who calls through this client: its session; runs and plans are not bound to a user."""
        return Caller(session_id=self.session_id)

    async def plan(self, options: RunOptions) -> ExecutionPlan:
        return await self.service.plan(options, self.caller)

    async def approve(
        self, plan_id: str, *, approved_by: str = "user", for_planner: bool = False
    ) -> dict[str, Any]:
        caller = Caller() if for_planner else self.caller
        return await self.service.approve(plan_id, caller, approved_by=approved_by)

    async def run(
        self, token: str, *, on_output: OutputCallback | None = None, run_id: str | None = None
    ) -> RunResult:
        return await self.service.run(token, self.caller, on_output=on_output, run_id=run_id)

    async def plan_and_run(
        self,
        options: RunOptions,
        *,
        confirmed: bool = False,
        on_output: OutputCallback | None = None,
        run_id: str | None = None,
    ) -> PlannedRun:
        return await self.service.plan_and_run(
            options, self.caller, confirmed=confirmed, on_output=on_output, run_id=run_id
        )

    @functools.cached_property
    def batches(self) -> BatchService:
        """Batches on this client's service (its policy and audit)."""
        return BatchService(self.service)

    async def plan_batch(
        self,
        items: Sequence[BatchItem],
        options: RunOptions = NO_OPTIONS,
        *,
        deadline_sec: int | None = None,
    ) -> BatchPlan:
        return await self.batches.plan_async(
            items,
            timeout_sec=options.timeout_sec,
            backend=options.backend,
            allow_network=options.allow_network,
            deadline_sec=deadline_sec,
            session_id=self.session_id,
            env=options.env,
            user=self.user,
        )

    async def approve_batch(self, batch_id: str) -> dict[str, Any]:
        return self.batches.approve(batch_id, session_id=self.session_id, user=self.user)

    async def run_batch(
        self,
        batch: BatchPlan,
        token: str | None,
        *,
        watch: BatchWatch,
        out: str | Path | None = None,
        workers: int | None = None,
        cluster: str | ClusterAccess | None = None,
    ) -> dict[str, Any]:
        claimed = self.batches.claim(
            batch.batch_id, token, session_id=self.session_id, user=self.user
        )
        run = self.batches.start(
            claimed,
            out=out,
            workers=workers,
            cluster=cluster,
            on_progress=watch.progress,
            user=self.user,
        )
        try:
            async with contextlib.aclosing(run.results()) as records:
                async for record in records:
                    watch.records.append(record)
        except (asyncio.CancelledError, KeyboardInterrupt):
            run.stopped = "cancelled"
            raise
        finally:
            watch.report = run.report()
        return watch.report

    async def cancel(self, run_id: str) -> None:
        self.service.cancel(run_id)

    async def run_file(self, run_id: str, name: str) -> bytes:
        return await asyncio.to_thread(self.service.run_file, run_id, name, self.caller)

    async def sessions(self) -> list[dict[str, Any]]:
        return self.service.sessions.list(self.caller)

    async def start_session(
        self, name: str, *, allow_network: bool | None = None
    ) -> dict[str, Any]:
        options = RunOptions(allow_network=allow_network)
        return await self.service.sessions.start(name, self.caller, options)

    async def stop_session(self, name: str) -> None:
        await self.service.sessions.stop(name, self.caller)

    async def restart_session(self, name: str) -> dict[str, Any]:
        return await self.service.sessions.restart(name, self.caller)

    async def interrupt_session(self, name: str) -> None:
        self.service.sessions.interrupt(name, self.caller)

    async def pending(self) -> list[ExecutionPlan]:
        return await self.service.pending()

    async def reject(self, plan_id: str) -> None:
        await self.service.reject(plan_id)

    async def plan_for_agent(self, options: RunOptions, *, auto_approve: bool) -> AgentPlan:
        return await self.service.plan_for_agent(options, self.caller, auto_approve=auto_approve)

    async def claim(self, plan_id: str, secret: str) -> ClaimAnswer:
        return await self.service.claim(plan_id, secret)

    async def status(self) -> Status:
        return await self.service.status()

    async def config(self) -> dict[str, Any]:
        return self.service.config()

    async def settings_file(self) -> str:
        return str(self.service.settings.path)

    async def configure(self, changes: Mapping[str, object], *, confirm: bool = False) -> Status:
        return await self.service.configure(changes, user=self.user, confirm=confirm)

    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        return await self.service.matrixlab.test_connection(url=url, token=token)

    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        return await self.service.matrixlab.lifecycle(action, progress, user=self.user)
