"""The Python API: ``run_batch(items)`` yields each item's result as it finishes.

Calling it is the approval (as executing a cell is): every item is planned,
the whole manifest approved once, blocked items reported and never run.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncGenerator, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..service import SandboxService
from .cluster import ClusterAccess
from .items import BatchItem, items_from_list, load_source
from .plan import BatchPlan
from .runner import BatchProgress, BatchRun
from .service import BatchService

_DONE = object()


def as_items(items: Iterable[object] | str | Path, each: str | None = None) -> list[BatchItem]:
    """Items from a list (of dicts or :class:`BatchItem`), or a JSONL file / folder path."""
    if isinstance(items, (str, Path)):
        return load_source(items, each)
    return items_from_list(items)


async def arun_batch(
    items: Iterable[object] | str | Path | BatchPlan,
    *,
    out: str | Path | None = None,
    workers: int | None = None,
    cluster: str | ClusterAccess | None = None,
    timeout_sec: int | None = None,
    backend: str | None = None,
    allow_network: bool | None = None,
    deadline_sec: int | None = None,
    each: str | None = None,
    env: Sequence[str] | None = None,
    service: SandboxService | None = None,
    on_progress: Callable[[BatchProgress], None] | None = None,
    on_start: Callable[[BatchRun], None] | None = None,
) -> AsyncGenerator[dict[str, Any], None]:
    """Plan, approve (the caller is the approver) and run; yield records as items finish."""
    batches = BatchService(service or SandboxService(root_dir=Path.cwd()))
    if isinstance(items, BatchPlan):
        batch = items
        batches.store.add(batch)
    else:
        batch = await batches.plan_async(
            as_items(items, each),
            timeout_sec=timeout_sec,
            backend=backend,
            allow_network=allow_network,
            deadline_sec=deadline_sec,
            env=env,
            user="api",
        )
    token = None
    if batches.service.require_approval:
        token = batches.approve(batch.batch_id, user="api")["approval_token"]
    claimed = batches.claim(batch.batch_id, token, user="api")
    run = batches.start(
        claimed, out=out, workers=workers, cluster=cluster, on_progress=on_progress, user="api"
    )
    if on_start is not None:
        on_start(run)
    async with contextlib.aclosing(run.results()) as records:
        async for record in records:
            yield record


def run_batch(
    items: Iterable[object] | str | Path | BatchPlan, **options: Any
) -> Iterator[dict[str, Any]]:
    """:func:`arun_batch` for synchronous code (a script, a notebook cell).

    The batch runs on an event loop of its own in a worker thread; results come
    as they finish. Leaving the loop early (``break``, Ctrl-C) cancels the rest;
    what finished is kept in ``out``.
    """
    answers: queue.Queue[Any] = queue.Queue()
    state: dict[str, Any] = {}

    async def main() -> None:
        state["loop"], state["task"] = asyncio.get_running_loop(), asyncio.current_task()
        async for record in arun_batch(items, **options):
            answers.put(record)

    def target() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # handed to the caller's thread
            answers.put(exc)
        answers.put(_DONE)

    thread = threading.Thread(target=target, name="gitpilot-batch", daemon=True)
    thread.start()
    try:
        while True:
            answer = answers.get()
            if answer is _DONE:
                break
            if isinstance(answer, BaseException):
                if not isinstance(answer, asyncio.CancelledError):
                    raise answer
                continue
            yield answer
    finally:
        if thread.is_alive() and "task" in state:
            state["loop"].call_soon_threadsafe(state["task"].cancel)
        thread.join()
