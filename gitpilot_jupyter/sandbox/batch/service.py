"""BatchService: plan -> approve -> run for many snippets at once, beside SandboxService.

Every face (CLI, REST, magic, Python API) goes through this class. Each item is
planned, checked and run exactly as a single snippet would be (the service's
``describe`` and ``run_plan``); the batch adds one approval for the whole
manifest, the results file, resuming, and the place items run.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from ..errors import ApprovalError, InvalidRequest
from ..plans import ExecutionPlan
from ..service import SandboxService
from .cluster import ClusterAccess
from .executors import Executor, make_executor
from .items import BatchItem
from .plan import BatchPlan, BatchStore, HashedInputs, hash_inputs, manifest_digest, plan_batch
from .runner import BatchProgress, BatchRun


class BatchService:
    """Batches on top of one :class:`SandboxService` (its settings, policy, audit)."""

    def __init__(self, service: SandboxService, store: BatchStore | None = None) -> None:
        self.service = service
        self.store = store or BatchStore()

    def plan(
        self,
        items: Sequence[BatchItem],
        *,
        timeout_sec: int | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        deadline_sec: int | None = None,
        session_id: str | None = None,
        env: Sequence[str] | None = None,
        user: str | None = None,
        hashed: HashedInputs | None = None,
    ) -> BatchPlan:
        """Plan every item; keep the batch pending for one approval.

        ``env``: names of variables of this process's environment passed to every item.
        ``hashed``: the items' inputs, hashed already (:meth:`plan_async` does it in a
        worker thread); else they are hashed here.
        """
        batch = plan_batch(
            self.service,
            items,
            timeout_sec=timeout_sec,
            backend=backend,
            allow_network=allow_network,
            deadline_sec=deadline_sec,
            session_id=session_id,
            env=env,
            hashed=hashed,
        )
        self.store.add(batch)
        for plan in batch.items.values():
            self._audit("plan", plan, user, source=plan.source, blocked=plan.blocked)
        return batch

    async def plan_async(self, items: Sequence[BatchItem], **options: Any) -> BatchPlan:
        """:meth:`plan` for a face on an event loop: the items' inputs (files that may be
        large) are read and hashed in a worker thread, the loop goes on meanwhile."""
        hashed = await self._hashed(items, options)
        return self.plan(items, **options, hashed=hashed)

    async def _hashed(self, items: Sequence[BatchItem], options: dict[str, Any]) -> HashedInputs:
        same = {k: options.get(k) for k in ("timeout_sec", "backend", "allow_network", "env")}
        return await asyncio.to_thread(hash_inputs, self.service, items, **same)

    def approve(
        self, batch_id: str, *, session_id: str | None = None, user: str | None = None
    ) -> dict[str, Any]:
        """One single-use token for the whole manifest: ``{approval_token, batch_id, expires_in}``.

        Audited per item (each item's plan id and digest), as single approvals are.
        """
        batch = self.store.get(batch_id)
        approval = self.store.approve(batch_id, session_id=session_id, user=user)
        for plan in batch.items.values():
            if not plan.blocked:
                self._audit("approve", plan, user, approved_by=f"batch {batch_id}")
        answer = approval.to_dict(self.store.tokens.clock())
        answer["batch_id"] = answer.pop("plan_id")
        return answer

    def claim(
        self,
        batch_id: str,
        approval_token: str | None,
        *,
        items: Sequence[BatchItem] | None = None,
        timeout_sec: int | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
        deadline_sec: int | None = None,
        session_id: str | None = None,
        env: Sequence[str] | None = None,
        user: str | None = None,
        skip: Collection[str] = (),
        hashed: HashedInputs | None = None,
    ) -> BatchPlan:
        """Spend the batch's token; the batch to run.

        With ``items`` (sent again, as a single run sends its code) they are planned
        anew and must match the approved manifest, else ``approval_mismatch`` (the
        token is not spent). When the server needs no approval the batch runs as is.
        ``skip`` names items whose results the caller holds already (a resumed run
        whose results file is on the caller's side): the approved manifest runs
        without them, as a results file here skips them (:class:`.runner.BatchRun`).
        ``hashed``: the inputs of ``items``, hashed already (:meth:`claim_async`).
        """
        batch = self.store.get(batch_id)
        skipped = set(skip)
        unknown = sorted(skipped - set(batch.items))
        if unknown:
            raise InvalidRequest(f"skip names items batch {batch_id} does not hold: {unknown[:5]}")
        digest = None
        if items is not None:
            again = plan_batch(
                self.service,
                items,
                timeout_sec=timeout_sec,
                backend=backend,
                allow_network=allow_network,
                deadline_sec=deadline_sec,
                env=env,
                hashed=hashed,
            )
            entries = [(i, p.digest) for i, p in again.items.items()]
            digest = manifest_digest(entries, again.deadline_sec)
        if not self.service.require_approval:
            if digest is not None and digest != batch.digest:
                raise ApprovalError(
                    "the items differ from the planned batch", code="approval_mismatch"
                )
        else:
            self.store.redeem(
                approval_token, batch_id, digest=digest, session_id=session_id, user=user
            )
        if not skipped:
            return batch
        rest = {i: plan for i, plan in batch.items.items() if i not in skipped}
        return dataclasses.replace(batch, items=rest)

    async def claim_async(
        self,
        batch_id: str,
        approval_token: str | None,
        *,
        items: Sequence[BatchItem] | None = None,
        **options: Any,
    ) -> BatchPlan:
        """:meth:`claim` for a face on an event loop: the inputs of ``items`` sent again
        are hashed in a worker thread."""
        hashed = await self._hashed(items, options) if items is not None else None
        return self.claim(batch_id, approval_token, items=items, **options, hashed=hashed)

    def start(
        self,
        batch: BatchPlan,
        *,
        out: str | Path | None = None,
        workers: int | None = None,
        cluster: str | ClusterAccess | None = None,
        executor: Executor | None = None,
        on_progress: Callable[[BatchProgress], None] | None = None,
        user: str | None = None,
    ) -> BatchRun:
        """A run of a claimed batch: iterate ``run.results()``, then read ``run.report()``."""
        executor = executor or make_executor(
            self.service, workers=workers, cluster=cluster, user=user
        )
        return BatchRun(batch, executor, out=out, on_progress=on_progress)

    def _audit(self, event: str, plan: ExecutionPlan, user: str | None, **extra: Any) -> None:
        if self.service.audit is None:
            return
        data = {
            "user": user,
            "plan_id": plan.plan_id,
            "digest": plan.digest,
            "language": plan.spec.language,
            "backend": plan.spec.backend,
            **extra,
        }
        self.service.audit(event, data)
