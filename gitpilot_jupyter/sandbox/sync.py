"""Run the async core from synchronous code (CLI, magic), even inside a running loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion and return its result.

    With no running loop this is ``asyncio.run``. Inside one (a kernel cell) the
    coroutine runs on its own loop in a worker thread, so the caller's loop is
    never re-entered.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    async def main() -> T:
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await coro

    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = asyncio.run(main())
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            done.set()

    # Carry the caller's context (ipykernel keeps the cell's parent header in a
    # contextvar) so output printed by the coroutine lands in the calling cell.
    context = contextvars.copy_context()
    thread = threading.Thread(
        target=context.run, args=(target,), name="gitpilot-sandbox-sync", daemon=True
    )
    thread.start()
    try:
        thread.join()
    except KeyboardInterrupt:
        # An interrupted cell cancels the coroutine (a local run then kills its
        # process tree) instead of leaving it running behind the user's back.
        if "task" in box:
            box["loop"].call_soon_threadsafe(box["task"].cancel)
        # Not thread.join(): a join interrupted once no longer waits (CPython before 3.13
        # releases the thread's lock on the way out), so the cancelled coroutine's clean-up
        # would still be running when the caller goes on.
        done.wait()
        raise
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
