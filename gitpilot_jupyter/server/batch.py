"""``POST /api/sandbox/batch/plan``, ``/batch/approve`` and ``/batch``: batches over REST.

The same flow as a single snippet: plan (every item planned, the scan summed
up, blocked items named), approve once (one token for the whole manifest), run.
The run streams NDJSON when asked: an ``item`` line per finished item and a
``progress`` line after it (and every second while none finishes), then
``{"type": "result", ...report}``. A client that goes away stops the batch.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tornado import web

from ..sandbox.batch import BatchService, items_from_list, make_executor
from ..sandbox.batch.executors import Executor
from .base import SandboxHandler, authorized_execute
from .handlers import PlanHandler
from .stream import LineSink, StreamingHandler

#: Seconds between progress lines while no item finishes (how soon a gone client is noticed).
HEARTBEAT_SEC = 1.0
#: Where the server keeps its batch service, beside the sandbox service.
BATCH_SERVICE_KEY = "gitpilot_sandbox_batches"
#: Where the app puts ``SandboxApp.batch_cluster`` and its TLS files (None: this machine).
BATCH_CLUSTER_KEY = "gitpilot_sandbox_batch_cluster"


def batch_service(handler: SandboxHandler) -> BatchService:
    """The server's one batch service, made on first use around its sandbox service."""
    batches = handler.settings.get(BATCH_SERVICE_KEY)
    if batches is None:
        batches = handler.settings[BATCH_SERVICE_KEY] = BatchService(handler.service)
    assert isinstance(batches, BatchService)
    return batches


class BatchPlanHandler(PlanHandler):
    """Plan a batch and keep it pending for one approval."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """``{"batch": plan}`` with the summary and every item's plan (the approver opens any)."""
        body = self.body("BatchPlanRequest")
        for item in body["items"]:
            self.check_not_hidden(item.get("file") if isinstance(item, dict) else None)

        async def plan() -> dict[str, Any]:
            items = items_from_list(body.pop("items"))
            batch = await batch_service(self).plan_async(items, **body, user=self.username)
            return {"batch": batch.to_dict()}

        self.write_json(await self.call(plan()))


class BatchApproveHandler(SandboxHandler):
    """Approve a pending batch: one single-use token for its whole manifest."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """``{approval_token, batch_id, expires_in}``."""
        body = self.body("BatchApproveRequest")

        async def approve() -> dict[str, Any]:
            return batch_service(self).approve(
                body["batch_id"], session_id=body.get("session_id"), user=self.username
            )

        self.write_json(await self.call(approve()))


class BatchRunHandler(StreamingHandler):
    """Run an approved batch (here, or on ``SandboxApp.batch_cluster``); stream the results."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Spend the token (items sent again must match the manifest), then run."""
        body = self.body("BatchRunRequest")
        batches = batch_service(self)
        workers = body.pop("workers", None)
        items = body.pop("items", None)

        async def claim() -> Any:
            return await batches.claim_async(
                body.pop("batch_id"),
                body.pop("approval_token", None),
                items=items_from_list(items) if items is not None else None,
                **body,
                user=self.username,
            )

        async def executor() -> Executor:
            # Where the items would run, checked before the token is spent: a cluster it may
            # not use (cluster_insecure) or a bad worker count leaves the approval unused.
            cluster = self.settings.get(BATCH_CLUSTER_KEY)
            return make_executor(
                batches.service, workers=workers, cluster=cluster, user=self.username
            )

        where = await self.call(executor())
        batch = await self.call(claim())
        run = batches.start(batch, executor=where)

        async def work(sink: LineSink | None) -> dict[str, Any]:
            results: list[dict[str, Any]] = []

            async def drain() -> None:
                async with contextlib.aclosing(run.results()) as records:
                    async for record in records:
                        if sink is None:
                            results.append(record)
                        else:
                            await sink({"type": "item", **record})
                            await sink({"type": "progress", **run.progress.to_dict()})

            task = asyncio.ensure_future(drain())
            while sink is not None and not task.done():
                # A heartbeat: the server learns that the client went away only by writing.
                await asyncio.wait({task}, timeout=HEARTBEAT_SEC)
                if self._client_gone:
                    run.stopped = "cancelled"
                    task.cancel()
                elif not task.done():
                    await sink({"type": "progress", **run.progress.to_dict()})
            try:
                await task
            except asyncio.CancelledError:
                if run.stopped != "cancelled":
                    raise
            report = run.report()
            return report if sink is not None else {"results": results, "report": report}

        await self.answer(work)
