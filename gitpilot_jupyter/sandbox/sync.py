"""Run the async core from synchronous code (CLI, magic), even inside a running loop.

Inside a running loop (a kernel cell, a widget's click) the coroutine runs on one
long-lived event loop in a daemon thread (:func:`shared_loop`), started on first use
and reused by every later call: no thread or loop is made per call, and what lives
on a loop (a warm pool's timers, a keep-alive HTTP connection) survives from one
cell to the next. Things bound to that loop register a closer with
:func:`on_shared_loop_close`; they are closed on the loop at interpreter exit.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, NoReturn, TypeVar

T = TypeVar("T")

#: Seconds the ``on_interrupt`` step of :func:`run_sync` may take (a REST call at most).
INTERRUPT_STEP_SEC = 15.0
#: Seconds the closers of the shared loop may take at interpreter exit.
CLOSE_AT_EXIT_SEC = 2.0


class _LoopThread:
    """One event loop running for ever in one daemon thread, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closers: list[Callable[[], Awaitable[object]]] = []

    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started (again, in a forked child whose thread is gone) when needed."""
        with self._lock:
            if self._loop is None or self._thread is None or not self._thread.is_alive():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._serve, args=(loop,), name="gitpilot-sandbox-loop", daemon=True
                )
                thread.start()
                self._loop, self._thread, self._closers = loop, thread, []
            return self._loop

    def current(self) -> asyncio.AbstractEventLoop | None:
        """The loop if one was started (never starts one)."""
        return self._loop

    def running_here(self) -> bool:
        """True in the shared loop's own thread (a blocking wait there would deadlock)."""
        return self._thread is not None and self._thread is threading.current_thread()

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        loop.run_forever()

    def on_close(self, closer: Callable[[], Awaitable[object]]) -> None:
        with self._lock:
            self._closers.append(closer)

    def close_at_exit(self) -> None:
        """Run the closers on the loop (at interpreter exit), each error ignored."""
        with self._lock:
            loop, closers, self._closers = self._loop, self._closers, []
            alive = self._thread is not None and self._thread.is_alive()
        if loop is None or not alive or not closers:
            return

        async def close_all() -> None:
            for closer in reversed(closers):
                # Exit goes on whatever fails: nothing is left to report to.
                with contextlib.suppress(Exception):
                    await closer()

        # A loop too busy to close in time: the OS closes what is left.
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(close_all(), loop).result(CLOSE_AT_EXIT_SEC)


_SHARED = _LoopThread()
atexit.register(_SHARED.close_at_exit)


def shared_loop() -> asyncio.AbstractEventLoop:
    """The long-lived loop :func:`run_sync` runs coroutines on inside a running loop."""
    return _SHARED.loop()


def on_shared_loop() -> bool:
    """True when the running loop is :func:`shared_loop`'s (called from a coroutine)."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        return False
    return _SHARED.running_here() and running is _SHARED.current()


def on_shared_loop_close(closer: Callable[[], Awaitable[object]]) -> None:
    """Have ``closer()`` awaited on the shared loop at interpreter exit (say, close a client)."""
    _SHARED.on_close(closer)


class _Call:
    """One coroutine handed to a loop in another thread, and what became of it."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Future[Any] | None = None
        self.value: Any = None
        self.error: BaseException | None = None
        # Waiting on events, not on Thread.join(): a join interrupted by KeyboardInterrupt
        # can leave the thread looking finished while it still runs.
        self.ready = threading.Event()
        self.done = threading.Event()

    async def main(self, coro: Coroutine[Any, Any, Any]) -> None:
        self.loop, self.task = asyncio.get_running_loop(), asyncio.current_task()
        self.ready.set()
        try:
            self.value = await coro
        except BaseException as exc:  # re-raised in the caller's thread
            self.error = exc
        finally:
            self.done.set()

    def start_on_shared_loop(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context
    ) -> None:
        loop = shared_loop()

        def start() -> None:
            # The task copies ``context`` (the caller's): see run_sync.
            loop.create_task(self.main(coro))

        loop.call_soon_threadsafe(start, context=context)

    def start_in_new_thread(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context
    ) -> None:
        def target() -> None:
            try:
                asyncio.run(self.main(coro))
            except BaseException as exc:  # main() keeps the coroutine's own error
                self.error = self.error or exc
            finally:
                self.ready.set()
                self.done.set()

        thread = threading.Thread(
            target=context.run, args=(target,), name="gitpilot-sandbox-sync", daemon=True
        )
        thread.start()


def run_sync(
    coro: Coroutine[Any, Any, T],
    *,
    on_interrupt: Callable[[], Awaitable[object]] | None = None,
    keep_loop: bool = False,
) -> T:
    """Run ``coro`` to completion and return its result.

    With no running loop (and no ``on_interrupt``, no ``keep_loop``) this is
    ``asyncio.run``. ``keep_loop``: what the coroutine starts must outlive it on its
    loop (a session's kernel client, its idle timer), so it runs on :func:`shared_loop`
    even with no running loop, as every other ``keep_loop`` call does. Inside
    one (a kernel cell) the coroutine runs on :func:`shared_loop`, a long-lived loop
    in a daemon thread, so the caller's loop is never re-entered (called from a
    coroutine on the shared loop itself, it gets a loop in a new thread instead).

    A ``KeyboardInterrupt`` (a kernel interrupt, Ctrl-C) cancels the coroutine and
    is re-raised. With ``on_interrupt``, the first interrupt runs ``on_interrupt()``
    on the coroutine's loop instead (say, stop the run) and keeps waiting for the
    coroutine's own answer; if that step fails, or on a second interrupt, the
    coroutine is cancelled and the interrupt re-raised.
    """
    if on_interrupt is None and not keep_loop:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro)
    call = _Call()
    # Carry the caller's context (ipykernel keeps the cell's parent header in a
    # contextvar) so output printed by the coroutine lands in the calling cell.
    context = contextvars.copy_context()
    if _SHARED.running_here():
        call.start_in_new_thread(coro, context)
    else:
        call.start_on_shared_loop(coro, context)

    def cancel_and_raise() -> NoReturn:
        # An interrupted cell cancels the coroutine (a local run then kills its
        # process tree, a REST run closes its stream, which stops it on the server)
        # instead of leaving it running behind the user's back.
        call.ready.wait()
        if call.loop is not None and call.task is not None and not call.done.is_set():
            call.loop.call_soon_threadsafe(call.task.cancel)
        call.done.wait()
        raise KeyboardInterrupt

    try:
        call.done.wait()
    except KeyboardInterrupt:
        if on_interrupt is None:
            cancel_and_raise()
        try:
            call.ready.wait()
            if call.loop is None or call.done.is_set():
                raise RuntimeError("nothing to interrupt")
            step = asyncio.run_coroutine_threadsafe(_await(on_interrupt), call.loop)
            step.result(timeout=INTERRUPT_STEP_SEC)
            call.done.wait()
        except KeyboardInterrupt:
            cancel_and_raise()
        except Exception:  # the step failed (the run had not started, the server is gone)
            if not call.done.is_set():
                cancel_and_raise()
    if call.error is not None:
        raise call.error
    return call.value  # type: ignore[no-any-return]


async def _await(step: Callable[[], Awaitable[object]]) -> None:
    await step()
