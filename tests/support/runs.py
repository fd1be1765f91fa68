"""Plan, approve and run in one call on a service: for tests whose caller is the approver."""

from __future__ import annotations

from typing import Any

from gitpilot_jupyter.sandbox.plans import ExecutionPlan
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.service import SandboxService


async def run_here(
    service: SandboxService, *, run_id: str | None = None, **options: Any
) -> tuple[ExecutionPlan, RunResult]:
    """The plan and the result of ``options`` run at once (a high warning does not stop it)."""
    planned = await service.plan_and_run(
        RunOptions(**options), approved_by="user", confirmed=True, run_id=run_id
    )
    assert planned.result is not None  # confirmed: nothing waits for a look
    return planned.plan, planned.result
