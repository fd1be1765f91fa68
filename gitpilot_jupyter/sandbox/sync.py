"""Run the async core from synchronous code (CLI, magic), even inside a running loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

#: Seconds the ``on_interrupt`` step of :func:`run_sync` may take (a REST call at most).
INTERRUPT_STEP_SEC = 15.0


def run_sync(
    coro: Coroutine[Any, Any, T],
    *,
    on_interrupt: Callable[[], Awaitable[object]] | None = None,
) -> T:
    """Run ``coro`` to completion and return its result.

    With no running loop (and no ``on_interrupt``) this is ``asyncio.run``. Inside
    one (a kernel cell) the coroutine runs on its own loop in a worker thread, so
    the caller's loop is never re-entered.

    A ``KeyboardInterrupt`` (a kernel interrupt, Ctrl-C) cancels the coroutine and
    is re-raised. With ``on_interrupt``, the first interrupt runs ``on_interrupt()``
    on the coroutine's loop instead (say, stop the run) and keeps waiting for the
    coroutine's own answer; if that step fails, or on a second interrupt, the
    coroutine is cancelled and the interrupt re-raised.
    """
    if on_interrupt is None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
    box: dict[str, Any] = {}
    ready = threading.Event()
    # Waiting on an event, not on Thread.join(): a join interrupted by KeyboardInterrupt
    # can leave the thread looking finished while it still runs.
    done = threading.Event()

    async def main() -> T:
        box["loop"], box["task"] = asyncio.get_running_loop(), asyncio.current_task()
        ready.set()
        return await coro

    def target() -> None:
        try:
            box["value"] = asyncio.run(main())
        except BaseException as exc:  # re-raised in the caller's thread
            box["error"] = exc
        finally:
            ready.set()
            done.set()

    # Carry the caller's context (ipykernel keeps the cell's parent header in a
    # contextvar) so output printed by the coroutine lands in the calling cell.
    context = contextvars.copy_context()
    thread = threading.Thread(
        target=context.run, args=(target,), name="gitpilot-sandbox-sync", daemon=True
    )
    thread.start()

    def cancel_and_raise() -> NoReturn:
        # An interrupted cell cancels the coroutine (a local run then kills its
        # process tree, a REST run closes its stream, which stops it on the server)
        # instead of leaving it running behind the user's back.
        ready.wait()
        if "task" in box and not done.is_set():
            box["loop"].call_soon_threadsafe(box["task"].cancel)
        done.wait()
        raise KeyboardInterrupt

    try:
        done.wait()
    except KeyboardInterrupt:
        if on_interrupt is None:
            cancel_and_raise()
        try:
            ready.wait()
            if "loop" not in box or done.is_set():
                raise RuntimeError("nothing to interrupt")
            step = asyncio.run_coroutine_threadsafe(_await(on_interrupt), box["loop"])
            step.result(timeout=INTERRUPT_STEP_SEC)
            done.wait()
        except KeyboardInterrupt:
            cancel_and_raise()
        except Exception:  # the step failed (the run had not started, the server is gone)
            if not done.is_set():
                cancel_and_raise()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


async def _await(step: Callable[[], Awaitable[object]]) -> None:
    await step()
