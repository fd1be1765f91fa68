"""Where a batch's items run: on this machine, or as tasks on a Dask cluster.

Both executors take ``(item id, plan)`` pairs and yield ``(item id, answer)`` in
the order items finish. An answer is ``{"result": envelope}`` or ``{"error",
"code"}``, plus ``worker`` and ``host``. A ``code`` of ``None`` marks a failure of
the machinery (a worker lost for good), not of the item: such an item is not
recorded, so a rerun tries it again. Closing the iterator cancels what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ClusterUnavailable, SandboxError
from ..plans import ExecutionPlan
from .worker import plan_payload, run_answer, run_item

if TYPE_CHECKING:
    from ..service import SandboxService

Answer = dict[str, Any]
#: How long to wait for a Dask scheduler to answer before saying it cannot be reached.
CONNECT_TIMEOUT_SEC = 10
#: How often a finished item's result is fetched again when the worker holding it died.
FETCH_TRIES = 3
#: The value of ``cluster`` that starts a Dask ``LocalCluster`` on this machine.
LOCAL_CLUSTER = "local"


def _distributed() -> Any:
    """The ``distributed`` module, untyped on purpose (its own hints are partial)."""
    return importlib.import_module("distributed")


def default_workers() -> int:
    """The concurrency of a batch on this machine: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class Executor(Protocol):
    """Runs a batch's items and yields their answers as they finish."""

    #: Where items run, as the report names it (``local``, ``dask local``, a scheduler address).
    name: str

    def map(self, items: Sequence[tuple[str, ExecutionPlan]]) -> AsyncIterator[tuple[str, Answer]]:
        """Run ``items``; yield ``(id, answer)`` as each one finishes."""


class LocalExecutor:
    """Items as concurrent local runs of the service, at most ``workers`` at a time."""

    def __init__(
        self, service: SandboxService, workers: int | None = None, user: str | None = None
    ) -> None:
        if workers is not None and workers < 1:
            raise SandboxError("--workers must be at least 1", code="invalid_request")
        self.service = service
        self.workers = workers or default_workers()
        self.user = user
        self.name = f"local ({self.workers} at a time)"

    async def map(
        self, items: Sequence[tuple[str, ExecutionPlan]]
    ) -> AsyncIterator[tuple[str, Answer]]:
        """A pool of ``workers`` coroutines pulling items in order."""
        queue = iter(items)
        finished: asyncio.Queue[tuple[str, Answer]] = asyncio.Queue()

        async def pull() -> None:
            for item_id, plan in queue:
                answer = await run_answer(self.service, plan, self.user, "local")
                finished.put_nowait((item_id, answer))

        pool = [asyncio.ensure_future(pull()) for _ in range(min(self.workers, len(items)))]
        try:
            for _ in range(len(items)):
                yield await finished.get()
        finally:
            for task in pool:
                task.cancel()
            await asyncio.gather(*pool, return_exceptions=True)


class DaskExecutor:
    """Items as Dask tasks: each runs :func:`~.worker.run_item` on whichever worker gets it.

    ``address`` is a scheduler address (``tcp://host:8786``) or ``local`` for a
    ``LocalCluster`` of ``workers`` single-threaded worker processes on this machine.
    A worker that dies mid-batch has its tasks rerun elsewhere by Dask.
    """

    def __init__(
        self,
        address: str,
        workers: int | None = None,
        user: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_SEC,
    ) -> None:
        if workers is not None and workers < 1:
            raise SandboxError("--workers must be at least 1", code="invalid_request")
        self.address = address
        self.workers = workers
        self.user = user
        self.connect_timeout = connect_timeout
        self.name = (
            f"dask LocalCluster ({workers or default_workers()} workers)"
            if address == LOCAL_CLUSTER
            else f"dask {address}"
        )

    async def _connect(self) -> tuple[Any, Any]:
        try:
            dd = _distributed()
        except ImportError:
            raise ClusterUnavailable(
                "running a batch on Dask needs dask and distributed: "
                "pip install 'gitpilot-jupyter[batch]'"
            ) from None
        cluster = None
        try:
            if self.address == LOCAL_CLUSTER:
                cluster = await dd.LocalCluster(
                    n_workers=self.workers or default_workers(),
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    asynchronous=True,
                )
            client = await dd.Client(
                cluster or self.address, asynchronous=True, timeout=self.connect_timeout
            )
        except (OSError, TimeoutError, ValueError) as exc:
            if cluster is not None:
                await cluster.close()
            raise ClusterUnavailable(
                f"cannot reach the Dask scheduler at {self.address}: {exc}; start one with "
                "`dask scheduler` (and workers with `dask worker ADDRESS`), or use --cluster local"
            ) from None
        return client, cluster

    async def map(
        self, items: Sequence[tuple[str, ExecutionPlan]]
    ) -> AsyncIterator[tuple[str, Answer]]:
        """Submit every item, yield answers in completion order, cancel the rest on close."""
        client, cluster = await self._connect()
        futures: list[Any] = []
        try:
            keys = [f"gitpilot-{plan.digest[7:23]}-{plan.plan_id}" for _, plan in items]
            futures = client.map(
                run_item, [plan_payload(plan, self.user) for _, plan in items], key=keys, pure=False
            )
            ids = {future.key: item_id for future, (item_id, _) in zip(futures, items, strict=True)}
            fetches: dict[str, int] = {}
            finished = _distributed().as_completed(futures)
            async for future in finished:
                try:
                    answer: Answer = await future
                except Exception as exc:
                    fetches[future.key] = fetches.get(future.key, 0) + 1
                    if future.status != "error" and fetches[future.key] < FETCH_TRIES:
                        finished.add(future)  # its result died with a worker: Dask reruns it
                        continue
                    # Lost for good (KilledWorker after Dask's retries): not the item's fault.
                    answer = {"error": f"{type(exc).__name__}: {exc}", "code": None, "worker": None}
                yield ids[future.key], answer
        finally:
            pending = [f for f in futures if not f.done()]
            with contextlib.suppress(Exception):
                if pending:
                    await client.cancel(pending)
            with contextlib.suppress(Exception):
                await client.close()
            if cluster is not None:
                with contextlib.suppress(Exception):
                    await cluster.close()


def make_executor(
    service: SandboxService,
    *,
    workers: int | None = None,
    cluster: str | None = None,
    user: str | None = None,
) -> Executor:
    """This machine (``cluster`` None), a ``LocalCluster`` (``local``) or a scheduler address."""
    if cluster:
        return DaskExecutor(cluster, workers, user)
    return LocalExecutor(service, workers, user)
