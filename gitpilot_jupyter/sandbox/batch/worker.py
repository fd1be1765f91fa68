"""What runs on a Dask worker: one batch item, with the worker node's own local sandbox.

The task function is imported by name on the worker (each worker node has this
package installed). It builds the worker's :class:`SandboxService` once, from
the worker node's settings, so the isolation a result reports is the node's.
The batch's approval was checked where the batch was submitted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import threading
from typing import TYPE_CHECKING, Any

from ..errors import SandboxError
from ..plans import ExecutionPlan
from ..request import Caller, RunOptions

if TYPE_CHECKING:
    from ..service import SandboxService

_lock = threading.Lock()
_service: SandboxService | None = None


def plan_payload(plan: ExecutionPlan, user: str | None) -> dict[str, Any]:
    """What a task carries: the item's plan, the request it answers (stdin included), the user.

    Not its run spec: the worker builds that again with its own node's limits.
    """
    return {"plan": plan.to_dict(), "options": plan.options().to_body(), "user": user}


def where() -> str:
    """This worker's address (``local`` outside Dask)."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "local"


def _worker_service() -> SandboxService:
    global _service
    with _lock:
        if _service is None:
            from ..service import SandboxService

            _service = SandboxService()
        return _service


async def run_answer(
    service: SandboxService,
    plan: ExecutionPlan,
    user: str | None,
    worker: str,
    *,
    options: RunOptions | None = None,
) -> dict[str, Any]:
    """Run ``plan`` on ``service``: ``{result | error, code, worker, host}``.

    ``options``: the request of a task's plan, whose spec ``service`` builds again.
    """
    answer: dict[str, Any] = {"worker": worker, "host": socket.gethostname()}
    try:
        if options is not None:
            plan = dataclasses.replace(plan, spec=service.planner.spec(options))
        result = await service.run_plan(plan, Caller(user=user))
    except SandboxError as exc:
        answer.update(error=exc.message, code=exc.code)
    else:
        answer["result"] = result.to_dict()
    return answer


def run_item(payload: dict[str, Any]) -> dict[str, Any]:
    """The Dask task: run one item on this worker with the node's own sandbox."""
    plan = ExecutionPlan.from_dict(payload["plan"])
    options = RunOptions.from_body(payload["options"])
    answer = run_answer(_worker_service(), plan, payload.get("user"), where(), options=options)
    return asyncio.run(answer)
