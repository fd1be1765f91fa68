"""What runs on a Dask worker: one batch item, under the worker node's own sandbox.

The task function is imported by name on the worker (each worker node has this
package installed). The worker trusts nothing the task says about how to run:

* it builds its :class:`SandboxService` once, from the node's own settings, with
  the backends the node's administrator allows (:data:`WORKER_BACKENDS_ENV`;
  never ``off`` unless listed there), so an item asking for another is refused;
* it builds the item's run spec again itself and runs it only when its digest is
  the one the approved manifest holds for that item, and the manifest's entries
  hash to the manifest digest the task carries: an item changed after approval,
  or a task made up without the manifest, is refused with ``approval_mismatch``;
* a network-on run never reaches the cluster: the scheduler's, workers' and
  nannies' addresses are blocked for its runs (:func:`.blockednets.block_also`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from ..errors import ApprovalError, SandboxError
from ..local import blockednets
from ..plans import ExecutionPlan
from ..request import Caller, RunOptions
from .cluster import host_networks
from .plan import manifest_digest

if TYPE_CHECKING:
    from ..service import SandboxService

#: The backends a worker node runs items with, comma-separated, as its administrator
#: sets them in the worker's environment; ``off`` only when listed.
WORKER_BACKENDS_ENV = "GITPILOT_WORKER_BACKENDS"
#: What a worker allows when its administrator says nothing.
DEFAULT_WORKER_BACKENDS = ("subprocess", "matrixlab")
#: Manifests a worker keeps checked (each batch is one).
MAX_MANIFESTS = 8

_lock = threading.Lock()
_service: SandboxService | None = None
#: Manifest digest -> ``{item id: run digest}``, once its entries hashed to it.
_manifests: OrderedDict[str, dict[str, str]] = OrderedDict()


def plan_payload(plan: ExecutionPlan, user: str | None) -> dict[str, Any]:
    """What a task carries: the item's plan, the request it answers (stdin included), the user.

    Not its run spec: the worker builds that again with its own node's limits.
    """
    return {"plan": plan.to_dict(), "options": plan.options().to_body(), "user": user}


def payload_plan(payload: dict[str, Any]) -> tuple[ExecutionPlan, RunOptions]:
    """The plan a task carries and its request (:func:`plan_payload` undone)."""
    return ExecutionPlan.from_dict(payload["plan"]), RunOptions.from_body(payload["options"])


def manifest_payload(
    digest: str, deadline_sec: int, entries: list[tuple[str, str]]
) -> dict[str, Any]:
    """The approved manifest as the worker checks it: its digest and every entry."""
    return {"digest": digest, "deadline_sec": deadline_sec, "items": [list(e) for e in entries]}


def where() -> str:
    """This worker's address (``local`` outside Dask)."""
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return "local"


def worker_backends() -> tuple[str, ...]:
    """The backends this node's administrator allows (:data:`WORKER_BACKENDS_ENV`)."""
    listed = os.environ.get(WORKER_BACKENDS_ENV, "")
    names = tuple(n.strip() for n in listed.split(",") if n.strip())
    return names or DEFAULT_WORKER_BACKENDS


def _worker_service() -> SandboxService:
    global _service
    with _lock:
        if _service is None:
            from ..service import SandboxService

            _service = SandboxService(allowed_backends=worker_backends())
        return _service


def approved_digests(manifest: dict[str, Any]) -> dict[str, str]:
    """``{item id: run digest}`` of a manifest whose entries hash to its digest."""
    digest = str(manifest.get("digest"))
    with _lock:
        if digest in _manifests:
            return _manifests[digest]
    entries = [(str(i), str(d)) for i, d in manifest.get("items", [])]
    if manifest_digest(entries, int(manifest.get("deadline_sec", 0))) != digest:
        raise ApprovalError(
            "the task's manifest does not hash to its digest: refused", code="approval_mismatch"
        )
    with _lock:
        _manifests[digest] = dict(entries)
        while len(_manifests) > MAX_MANIFESTS:
            _manifests.popitem(last=False)
    return _manifests[digest]


def block_cluster(addresses: list[str]) -> None:
    """Keep this node's network-on runs from the cluster: ``addresses`` and its scheduler."""
    try:
        from distributed import get_worker

        worker = get_worker()
        addresses = [*addresses, worker.address, str(worker.scheduler.address)]
    except (ImportError, ValueError):
        pass
    blockednets.block_also(host_networks(addresses))


#: The answer's key of the bytes of the run's ``out/`` files (a Dask task's answer).
FILE_BYTES = "file_bytes"


async def run_answer(
    service: SandboxService,
    plan: ExecutionPlan,
    user: str | None,
    worker: str,
    *,
    carry_files: bool = False,
) -> dict[str, Any]:
    """Run ``plan`` on ``service``: ``{result | error, code, worker, host}``.

    ``carry_files`` (a Dask worker): the bytes of the run's ``out/`` files go with the
    answer (``{name: bytes}`` under :data:`FILE_BYTES`) and this service forgets them:
    the batch's client keeps them for the run's owner, as a local run's service does.
    """
    answer: dict[str, Any] = {"worker": worker, "host": socket.gethostname()}
    try:
        result = await service.run_plan(plan, Caller(user=user))
    except SandboxError as exc:
        answer.update(error=exc.message, code=exc.code)
    else:
        answer["result"] = result.to_dict()
        if carry_files and result.files:
            store = service.executor.out_store
            answer[FILE_BYTES] = await asyncio.to_thread(store.take, result.run_id, user)
    return answer


def checked_plan(service: SandboxService, payload: dict[str, Any], manifest: Any) -> ExecutionPlan:
    """The task's plan with the spec this node builds for it, once the approved manifest
    holds that spec's digest for the item; else the refusal."""
    plan, options = payload_plan(payload)
    approved = approved_digests(manifest).get(str(payload.get("id")))
    spec = service.planner.spec(options)  # this node's settings and allowed backends
    if approved is None or spec.digest != approved:
        raise ApprovalError(
            f"item {payload.get('id')!r} is not the one the manifest approved: refused (the "
            "run this worker builds from its own settings must have the approved digest)",
            code="approval_mismatch",
        )
    return dataclasses.replace(plan, spec=spec)


def run_item(payload: dict[str, Any], manifest: Any) -> dict[str, Any]:
    """The Dask task: check one item against the manifest, run it with this node's sandbox."""
    service = _worker_service()
    block_cluster(list(payload.get("cluster", [])))
    try:
        plan = checked_plan(service, payload, manifest)
    except SandboxError as exc:
        return {"worker": where(), "host": socket.gethostname(), "error": exc.message,
                "code": exc.code}  # fmt: skip
    return asyncio.run(run_answer(service, plan, payload.get("user"), where(), carry_files=True))
