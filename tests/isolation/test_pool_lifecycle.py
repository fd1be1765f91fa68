"""The warm pool's life: it follows demand within its limits, refills after answers,
is on by default, and closes (with its backend, from any loop or thread) leaving nothing."""

from __future__ import annotations

import asyncio
import concurrent.futures.thread
import gc
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.local.backends import NullSandbox, SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator, _cgroup_tree
from gitpilot_jupyter.sandbox.local.pool import POOL_ENV, PoolConfig
from gitpilot_jupyter.sandbox.local.pool import refill as pool_module
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.sync import run_sync
from tests.support.system import require_system

from .conftest import require_mechanism
from .pooling import (
    pooled,
    request,
    scenario,
    the_pool,
    until,
)


def test_the_pool_follows_demand_within_its_limits() -> None:
    seen: list[int] = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await until(lambda: pool.idle() >= 2)  # one run at a time: two waiting
        await asyncio.sleep(0.5)
        seen.append(pool.idle() + pool.starting())
        runs = [backend.run(request("import time; time.sleep(1)")) for _ in range(5)]
        results = await asyncio.gather(*runs)
        assert sum(r.warm for r in results) >= 2
        await until(lambda: pool.idle() >= 3)  # five at once: as many as the cap allows
        await asyncio.sleep(0.5)
        seen.append(pool.idle() + pool.starting())

    scenario(body, pooled(max_slots=3, min_slots=1))
    assert seen == [2, 3]


def test_runs_one_after_another_keep_more_slots_waiting() -> None:
    """Runs back to back take slots faster than one refill makes them: the pool keeps
    as many as began within one slot's start time (one at a time would be peak + 1)."""
    wanted: list[int] = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await until(lambda: pool.idle() >= 2)
        key = next(iter(pool._idle))
        # Measured from the slots' real starts; then set long, so that the eight runs
        # below all began within one start time however slow this machine is today.
        assert 0 < pool._ready_sec < 5
        pool._ready_sec = 60.0
        for _ in range(8):
            await backend.run(request("pass"))
        wanted.append(pool.target(key))
        pool._ready_sec = 0.001  # a start time long past: the rate counts none of them
        wanted.append(pool.target(key))

    scenario(body, pooled(max_slots=6, min_slots=1))
    assert wanted[0] == 6, wanted  # 8 runs + 1, within pool_max_slots
    assert wanted[1] == 2, wanted  # one at a time: peak + 1


def test_the_refill_waits_for_the_answer_unless_a_run_needs_a_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slot's start takes the GIL and a core: after a run it waits (REFILL_DELAY_SEC,
    # made long here) so the answer reaches the caller first. A run that finds no idle
    # slot ends the wait at once, and closing the pool during it starts nothing.
    monkeypatch.setattr(pool_module, "REFILL_DELAY_SEC", 60.0)
    # The pool's periodic look (every 5 s) also refills, without the delay: on a loaded
    # machine the first slots can take that long, and the look then fell inside a run.
    monkeypatch.setattr(pool_module, "_TICK_SEC", 3600.0)
    backend = pooled(max_slots=2, min_slots=1)
    started: list[float] = []

    def counted(key: Any) -> Any:
        started.append(time.monotonic())
        return SubprocessSandbox._spawn_slot(backend, key)

    backend._spawn_slot = counted  # type: ignore[method-assign]

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))  # a miss: its slots start at once
        await until(lambda: pool.idle() >= 2)
        before = len(started)
        assert (await backend.run(request("pass"))).warm  # one slot left idle
        await asyncio.sleep(0.3)
        assert (pool.idle(), pool.starting(), len(started)) == (1, 1, before)
        assert (await backend.run(request("pass"))).warm  # takes the last one
        await until(lambda: pool.idle() >= 2)  # well before the 60 s delay
        assert len(started) == before + 2
        assert (await backend.run(request("pass"))).warm
        assert pool.starting() == 0  # queued for once the answer is out: the next turn
        await asyncio.sleep(0)
        assert pool.starting() == 1
        closing = time.monotonic()
        await backend.aclose()
        assert time.monotonic() - closing < 10
        assert (pool.idle(), pool.starting(), len(started)) == (0, 0, before + 2)

    scenario(body, backend)


def test_closing_leaves_no_process_cgroup_or_folder() -> None:
    slots: list[Any] = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await asyncio.gather(*(backend.run(request("pass")) for _ in range(3)))
        await until(lambda: pool.idle() >= 3)
        slots.extend(s for q in pool._idle.values() for s in q)
        for slot in slots:  # each waiting slot's own cgroup folders (memory, pids)
            cgroup_dirs.extend(slot.launch._cgroup.dirs if slot.launch._cgroup else [])

    cgroup_dirs: list[Path] = []
    scenario(body, pooled(max_slots=4))
    assert len(slots) >= 3
    for slot in slots:
        assert slot.popen.returncode is not None
        with pytest.raises(ProcessLookupError):
            os.kill(slot.popen.pid, 0)
        assert not slot.workdir.exists()
    if _cgroup_tree()[0] is not None:
        assert cgroup_dirs and not [d for d in cgroup_dirs if d.exists()]


def test_a_run_ending_as_the_interpreter_shuts_down_starts_nothing_and_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a run's answer come its refill and removal; once the interpreter is shutting
    down (a CLI stopped by Ctrl-C) no thread can start: no slot starts, the removal is
    done at once, and nothing raises in the event loop."""
    errors: list[dict[str, Any]] = []
    seen: list[tuple[str, bool, int]] = []

    async def body(backend: SubprocessSandbox) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await until(lambda: pool.idle() >= 1 and not pool.starting())
        monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)
        try:
            result = await backend.run(request("print(1)"))
            await asyncio.sleep(0.2)  # its refill and removal have had their turn
        finally:
            monkeypatch.setattr(concurrent.futures.thread, "_shutdown", False)
        seen.append((result.stdout, result.warm, pool.starting()))

    scenario(body, pooled(max_slots=1))
    assert seen == [("1\n", True, 0)]
    assert errors == []


def test_pool_off_and_where_it_cannot_work() -> None:
    require_mechanism("bwrap")
    off = SubprocessSandbox(isolator=LayeredIsolator("bwrap"), pool=PoolConfig(mode="off"))
    assert off.pool() is None and off.pool_error() == "turned off (pool = off)"
    result = asyncio.run(off.run(request("print(1)")))
    assert (result.stdout, result.warm) == ("1\n", False)
    unshare = SubprocessSandbox(isolator=LayeredIsolator("unshare"), pool=PoolConfig())
    assert unshare.pool() is None and "bubblewrap" in str(unshare.pool_error())
    assert NullSandbox(pool=PoolConfig()).pool() is None


def test_the_pool_is_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POOL_ENV, raising=False)
    require_mechanism("bwrap")
    backend = SubprocessSandbox(isolator=LayeredIsolator("bwrap"))
    assert backend.pool_config.mode == "auto"
    require_system("bwrap", backend.pool_error() is None, f"no pool here: {backend.pool_error()}")
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        results.append(await backend.run(request("print(1)")))
        await until(lambda: the_pool(backend).idle() >= 1)
        results.append(await backend.run(request("print(1)")))

    scenario(body, backend)
    assert [r.warm for r in results] == [False, True]


def test_a_backend_dropped_without_closing_takes_its_slots_along() -> None:
    backend = pooled(max_slots=2)
    slots: list[Any] = []

    async def body(mine: SubprocessSandbox) -> None:
        await mine.run(request("pass"))
        pool = the_pool(mine)
        await until(lambda: pool.idle() >= 2)
        slots.extend(s for q in pool._idle.values() for s in q)

    asyncio.run(body(backend))  # no aclose(): the loop is gone, the slots wait
    del backend
    gc.collect()
    for slot in slots:
        with pytest.raises(ProcessLookupError):
            os.kill(slot.popen.pid, 0)
        assert not slot.workdir.exists()


def test_closing_inside_the_pools_own_lock_does_not_hang() -> None:
    # The backend's finalizer closes its pool; a garbage-collection pass may run it in a
    # thread that holds the pool's lock at that moment (a refill, the tick).
    pool = the_pool(pooled(max_slots=1))
    closed = threading.Event()

    def collected_while_locked() -> None:
        with pool._lock:
            pool.close_now()
        closed.set()

    threading.Thread(target=collected_while_locked, daemon=True).start()
    assert closed.wait(30), "close_now deadlocked on the pool's own lock"


def wait_for_an_idle_slot(backend: SubprocessSandbox, within: float = 15.0) -> None:
    """Until the pool holds a slot ready (a loaded machine refills in more than 0.5 s)."""
    deadline = time.monotonic() + within
    while backend.pool_report()["idle"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)


def test_calls_each_on_a_loop_of_their_own_stay_warm() -> None:
    # The CLI's commands: each call on a new loop (asyncio.run), which is gone before
    # the pool's workers finish; the refill must not wait for it.
    backend = pooled()
    results: list[RunResult] = []
    try:
        for _ in range(6):
            results.append(asyncio.run(backend.run(request("print(1)"))))
            wait_for_an_idle_slot(backend)
    finally:
        asyncio.run(backend.aclose())
    assert [r.warm for r in results] == [False] + [True] * 5


def test_calls_from_kernel_cells_stay_warm() -> None:
    # A kernel's cells: run_sync hands each call to one long-lived loop in a thread.
    backend = pooled()
    results: list[RunResult] = []

    async def cell() -> None:
        results.append(run_sync(backend.run(request("print(1)"))))

    try:
        for _ in range(6):
            asyncio.run(cell())
            wait_for_an_idle_slot(backend)
    finally:
        asyncio.run(backend.aclose())
    assert [r.warm for r in results] == [False] + [True] * 5


def test_a_backend_let_go_inside_a_pool_worker_closes_its_pool_there() -> None:
    # The worker starting a slot holds the backend for a moment: when the owner lets
    # go first, the backend dies in that worker, which must close the pool without
    # waiting for itself.
    backend = pooled(max_slots=1, min_slots=1)
    owner = weakref.ref(backend)

    def slow(key: Any) -> Any:
        time.sleep(0.5)  # the pool's worker holds the backend meanwhile
        mine = owner()
        assert mine is not None
        return SubprocessSandbox._spawn_slot(mine, key)

    backend._spawn_slot = slow  # type: ignore[method-assign]
    pool = the_pool(backend)
    asyncio.run(backend.run(request("pass")))  # its end starts a slot (slowly)
    del backend
    gc.collect()
    assert owner() is not None  # still held by the worker
    deadline = time.monotonic() + 30
    while not pool._closed or pool.starting():
        assert time.monotonic() < deadline, "the pool was not closed"
        time.sleep(0.05)
    assert pool.idle() == 0
