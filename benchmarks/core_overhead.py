"""Benchmark 10, the core's own work around a warm run (issue #16), phase by phase.

The in-process path of the warm-pool benchmark (``plan_and_run``: plan,
approve, run, pool ``auto``, a settings file present) with the child's share
taken out: the time the backend waits for the child to exit is summed per run,
so "around the child" is the run's wall time minus that wait, and the main
thread's CPU time is what the core spent itself (system calls included).
Between runs it sleeps 30 ms, a user's pace: the pool refills meanwhile.

Comparing two checkouts on a shared machine, run each alternately, several times::

    cd <checkout> && PYTHONPATH=$PWD .venv/bin/python -m benchmarks.core_overhead --runs 80
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.local import supervise
from gitpilot_jupyter.sandbox.local.pool import PoolConfig, WarmPool
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore

from .common import Context, Measure, loadavg, median

BENCH = "core around a warm run"
CODE = "print(2+2)"


def _timed(
    fn: Callable[..., Coroutine[Any, Any, Any]], into: list[float]
) -> Callable[..., Coroutine[Any, Any, Any]]:
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await fn(*args, **kwargs)
        finally:
            into[0] += time.perf_counter() - started

    return wrapper


def measure(workdir: Path, runs: int) -> dict[str, list[float]]:
    """Per run: wall, wall minus the child's wait, main-thread CPU, the hand-out (take)."""
    folder = workdir / "core-overhead"
    folder.mkdir(parents=True, exist_ok=True)
    settings = folder / "settings.json"
    settings.write_text('{"sandbox": {"timeout_sec": 60}, "ui": {}}', encoding="utf-8")
    child, take = [0.0], [0.0]
    original_exited, original_take = supervise._exited, WarmPool.take

    def timed_take(pool: WarmPool, key: Any) -> Any:
        started = time.perf_counter()
        try:
            return original_take(pool, key)
        finally:
            take[0] += time.perf_counter() - started

    supervise._exited = _timed(original_exited, child)  # type: ignore[assignment]
    WarmPool.take = timed_take  # type: ignore[method-assign]
    service = SandboxService(settings=SettingsStore(folder), pool=PoolConfig(mode="auto"))
    loop = asyncio.new_event_loop()
    samples: dict[str, list[float]] = {"wall": [], "around": [], "cpu": [], "take": [], "warm": []}
    try:
        time.sleep(2.1)  # a settings file older than a moment, as a server's is

        def one() -> bool:
            planned = loop.run_until_complete(
                service.plan_and_run(RunOptions(language="python", code=CODE), confirmed=True)
            )
            result = planned.result
            assert result is not None and result.stdout == "4\n", result
            return result.warm

        for _ in range(5):  # imports, probes, the pool's demand
            one()
            time.sleep(0.03)
        for _ in range(runs):
            time.sleep(0.03)
            child[0] = take[0] = 0.0
            wall, cpu = time.perf_counter(), time.thread_time()
            warm = one()
            wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
            for name, value in (
                ("wall", wall),
                ("around", wall - child[0]),
                ("cpu", cpu),
                ("take", take[0]),
                ("warm", float(warm)),
            ):
                samples[name].append(value)
    finally:
        loop.run_until_complete(service.aclose())
        loop.close()
        supervise._exited = original_exited  # type: ignore[assignment]
        WarmPool.take = original_take  # type: ignore[method-assign]
    return samples


def run(ctx: Context) -> list[Measure]:
    """Medians in milliseconds."""
    runs = ctx.n(80)
    samples = measure(ctx.workdir, runs)
    warm = f"{int(sum(samples['warm']))}/{runs} runs warm"
    rows = (
        ("in-process warm run", "wall", "plan + approve + run, pool auto"),
        ("around the child", "around", "the run minus the wait for the child to exit"),
        ("main-thread CPU", "cpu", "what the core's own work cost the event loop's thread"),
        ("hand-out (pool take)", "take", "includes the hand-out's look at the host's view"),
    )
    return [
        Measure(BENCH, name, round(median(samples[key]) * 1000, 2), "ms", note=f"{note}; {warm}")
        for name, key, note in rows
    ]


def main() -> None:
    """Print the medians (for comparing checkouts side by side)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.core_overhead")
    parser.add_argument("--runs", type=int, default=80)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        samples = measure(Path(tmp), args.runs)
    shown = ", ".join(
        f"{key} {median(samples[key]) * 1000:.2f} ms" for key in ("wall", "around", "cpu", "take")
    )
    print(f"{shown}; warm {int(sum(samples['warm']))}/{args.runs}; load {loadavg()}")


if __name__ == "__main__":
    main()
