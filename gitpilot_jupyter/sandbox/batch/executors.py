"""Where a batch's items run: on this machine, or as tasks on a Dask cluster.

Both executors take ``(item id, plan)`` pairs of an approved batch and yield
``(item id, answer)`` in the order items finish. An answer is ``{"result": envelope}``
or ``{"error", "code"}``, plus ``worker`` and ``host``. A ``code`` of ``None`` marks a failure of
the machinery (a worker lost for good), not of the item: such an item is not
recorded, so a rerun tries it again. Closing the iterator cancels what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ClusterUnavailable, SandboxError
from ..outfiles import OUT_DIR
from ..plans import ExecutionPlan
from ..service.capacity import usable_cores
from .cluster import (
    ClusterAccess,
    cluster_access,
    cluster_addresses,
    distributed,
    start_local_cluster,
)
from .plan import BatchPlan
from .worker import FILE_BYTES, manifest_payload, plan_payload, run_answer, run_item

if TYPE_CHECKING:
    from ..service import SandboxService
    from ..service.outstore import OutStore

Answer = dict[str, Any]
#: How long to wait for a Dask scheduler to answer before saying it cannot be reached.
CONNECT_TIMEOUT_SEC = 10
#: How often a finished item's result is fetched again when the worker holding it died.
FETCH_TRIES = 3
#: Items kept submitted per worker thread (one running, one queued), and at least.
IN_FLIGHT_PER_THREAD = 2
MIN_IN_FLIGHT = 4


def default_workers() -> int:
    """The concurrency of a batch on this machine: the cores this process may use."""
    return usable_cores()


class Executor(Protocol):
    """Runs a batch's items and yields their answers as they finish."""

    #: Where items run, as the report names it (``local``, ``dask local``, a scheduler address).
    name: str

    def map(
        self, items: Sequence[tuple[str, ExecutionPlan]], batch: BatchPlan
    ) -> AsyncIterator[tuple[str, Answer]]:
        """Run ``items`` of the approved ``batch``; yield ``(id, answer)`` as each finishes."""


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
        self, items: Sequence[tuple[str, ExecutionPlan]], batch: BatchPlan
    ) -> AsyncIterator[tuple[str, Answer]]:
        """A pool of ``workers`` coroutines pulling items in order (approved here)."""
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

    ``cluster`` is a ``tls://`` scheduler address reached with mutual TLS, or
    ``local`` for a ``LocalCluster`` of ``workers`` single-threaded worker processes
    on loopback (see :mod:`.cluster`). At most ``in_flight`` items are submitted at a
    time, and each result is fetched and released as soon as it is done: it leaves
    the worker at once, so a worker that dies later has nothing of it to rerun, and
    worker memory holds ``in_flight`` results at most whatever the batch size. An item
    whose worker died before its result was fetched has no result yet: Dask runs it
    again elsewhere.

    The files an item's run left under ``out/`` come back with its answer and are kept
    in ``out_store`` (the batch's service's) for the item's user, as a local item's are:
    ``result.files`` lists those kept, its notes say what did not come back whole.
    Without a store they are not kept (the notes say so).
    """

    def __init__(
        self,
        cluster: str | ClusterAccess,
        workers: int | None = None,
        user: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_SEC,
        in_flight: int | None = None,
        out_store: OutStore | None = None,
    ) -> None:
        if workers is not None and workers < 1:
            raise SandboxError("--workers must be at least 1", code="invalid_request")
        self.access = cluster_access(cluster)
        self.access.check()
        self.address = self.access.address
        self.workers = workers
        self.user = user
        self.connect_timeout = connect_timeout
        self.in_flight = in_flight
        self.out_store = out_store
        self.name = (
            f"dask LocalCluster ({workers or default_workers()} workers)"
            if self.access.local
            else f"dask {self.address}"
        )

    async def _connect(self) -> tuple[Any, Any]:
        try:
            dd = distributed()
        except ImportError:
            raise ClusterUnavailable(
                "running a batch on Dask needs dask and distributed: "
                "pip install 'gitpilot-jupyter[batch]'"
            ) from None
        cluster = None
        security = None if self.access.local else self.access.security()
        try:
            if self.access.local:
                cluster = await start_local_cluster(self.workers or default_workers())
                security = cluster.security
            client = await dd.Client(
                cluster or self.address,
                asynchronous=True,
                timeout=self.connect_timeout,
                security=security,
            )
        except (OSError, TimeoutError, ValueError) as exc:
            if cluster is not None:
                await cluster.close()
            raise ClusterUnavailable(
                f"cannot reach the Dask scheduler at {self.address}: {exc}; start one with "
                "`dask scheduler --protocol tls` and its certificates (workers with `dask worker "
                "ADDRESS` and theirs), give this side a certificate of the same authority, "
                "or use --cluster local"
            ) from None
        return client, cluster

    async def _window(self, client: Any) -> tuple[int, list[str]]:
        """How many items to keep submitted, and the cluster's addresses to block."""
        identity = await client.scheduler.identity(n_workers=-1)
        threads = sum(int(w.get("nthreads", 1)) for w in identity.get("workers", {}).values())
        window = self.in_flight or max(IN_FLIGHT_PER_THREAD * threads, MIN_IN_FLIGHT)
        return window, cluster_addresses(identity)

    async def map(
        self, items: Sequence[tuple[str, ExecutionPlan]], batch: BatchPlan
    ) -> AsyncIterator[tuple[str, Answer]]:
        """Submit a window of items, yield each answer as it finishes and release its
        future at once, submit the next; cancel the rest on close."""
        client, cluster = await self._connect()
        dd = distributed()
        futures: dict[str, Any] = {}
        try:
            window, addresses = await self._window(client)
            entries = [(i, p.digest) for i, p in batch.items.items()]
            manifest = manifest_payload(batch.digest, batch.deadline_sec, entries)
            [approved] = await client.scatter([manifest], broadcast=True, hash=False)
            todo = iter(items)
            ids: dict[str, str] = {}
            fetches: dict[str, int] = {}
            finished = dd.as_completed()

            def submit() -> None:
                for item_id, plan in todo:
                    payload = plan_payload(plan, self.user)
                    payload.update(id=item_id, cluster=addresses)
                    key = f"gitpilot-{plan.digest[7:23]}-{plan.plan_id}"
                    future = client.submit(run_item, payload, approved, key=key, pure=False)
                    futures[key], ids[key] = future, item_id
                    finished.add(future)
                    if len(futures) >= window:
                        return

            submit()
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
                # Released before it is recorded: from here nothing can run it again.
                futures.pop(future.key).release()
                submit()
                await self._keep_files(answer)
                yield ids.pop(future.key), answer
        finally:
            pending = [f for f in futures.values() if not f.done()]
            with contextlib.suppress(Exception):
                if pending:
                    await client.cancel(pending)
            with contextlib.suppress(Exception):
                await client.close()
            if cluster is not None:
                with contextlib.suppress(Exception):
                    await cluster.close()

    async def _keep_files(self, answer: Answer) -> None:
        """Keep the ``out/`` files that came with ``answer`` (in a worker thread)."""
        data = answer.pop(FILE_BYTES, None) or {}
        result = answer.get("result")
        if result is None or not result.get("files"):
            return
        if self.out_store is None:
            result["notes"] = [*result["notes"], f"{OUT_DIR}/ files not kept: no store here"]
            result["files"] = []
            return
        kept, notes = await asyncio.to_thread(
            self.out_store.put, result["run_id"], self.user, result["files"], data
        )
        result["files"], result["notes"] = kept, [*result["notes"], *notes]


def make_executor(
    service: SandboxService,
    *,
    workers: int | None = None,
    cluster: str | ClusterAccess | None = None,
    user: str | None = None,
) -> Executor:
    """This machine (``cluster`` None), a ``LocalCluster`` (``local``) or a ``tls://``
    scheduler (:class:`ClusterAccess`).

    ``workers`` over the administrator's ``max_batch_workers`` is clamped to it (the
    executor's name says how many run at a time): the batch's token is spent by now.
    """
    if workers is not None:
        workers = min(workers, service.executor.admission.limits.batch_workers)
    if cluster:
        return DaskExecutor(cluster, workers, user, out_store=service.executor.out_store)
    return LocalExecutor(service, workers, user)
