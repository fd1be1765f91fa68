"""Batches through the one door: what every face does with a batch, on any client.

A face plans a batch with :meth:`~.base.SandboxClient.plan_batch`, shows it, decides
(the caller's yes), then :func:`approve_and_run_batch` approves it once and runs it,
in this process or on the Jupyter server (its policy, its audit log). The face only
shows the plan, the progress and the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sandbox.batch import BatchPlan, ClusterAccess
from ..sandbox.batch.runner import BatchWatch, cancelled_report
from .base import SandboxClient

__all__ = ["BatchWatch", "approve_and_run_batch", "final_report"]


async def approve_and_run_batch(
    client: SandboxClient,
    batch: BatchPlan,
    *,
    watch: BatchWatch,
    out: str | Path | None = None,
    workers: int | None = None,
    cluster: str | ClusterAccess | None = None,
) -> dict[str, Any]:
    """Approve ``batch`` as the caller (when the server asks for approval) and run it.

    The report of the run (``watch.report`` too); each record lands in ``watch.records``.
    """
    token = None
    if batch.requires_approval:
        token = str((await client.approve_batch(batch.batch_id))["approval_token"])
    return await client.run_batch(
        batch, token, watch=watch, out=out, workers=workers, cluster=cluster
    )


def final_report(
    client: SandboxClient, batch: BatchPlan, watch: BatchWatch, out: str | Path | None
) -> dict[str, Any]:
    """The run's report, or what a stop before it leaves to say (``stopped: cancelled``)."""
    if watch.report is not None:
        return watch.report
    return cancelled_report(batch, watch.records, watch.last, executor=client.path, out=out)
