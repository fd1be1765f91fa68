"""Benchmark 15, sessions (issue #32, the core only): start time and a warm cell's round trip.

A session's start is ``SessionManager.start`` until the kernel answers: with a kernel
started ahead (the pool on, each start once the one ahead is up: a user's pace), and
cold (the pool off: its run started as a cold run is, the kernel's imports, the
client connected). A warm cell
is ``SessionManager.run_cell`` of a one-line cell in a started session, until its
envelope is back; the reference is the same cell sent by ``jupyter_client`` to a
plain ipykernel on the host (no sandbox), until its reply and idle status. The
issue's targets are for the REST face (plan + approve + run), which comes later:
the core's numbers are what that face will add its own work to.

    cd <checkout> && PYTHONPATH=$PWD .venv/bin/python -m benchmarks.sessions
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.pool import PoolConfig
from gitpilot_jupyter.sandbox.sessions import SessionManager
from gitpilot_jupyter.sandbox.spec import RunSpec

from .common import Context, Measure, loadavg, median

BENCH = "sessions"
CELL = "y = 2 + 2"


def _cell(name: str) -> RunSpec:
    return RunSpec(
        language="python",
        code=CELL,
        stdin=None,
        timeout_sec=30,
        network=False,
        backend="subprocess",
        session=name,
    )


async def _ahead_ready(manager: SessionManager) -> None:
    """Wait until the kernel started ahead is up (a user's pace between two starts)."""
    ahead = manager.spare._ahead
    if ahead is not None:
        with contextlib.suppress(Exception):
            await asyncio.shield(ahead.task)


def _request() -> RunRequest:
    return RunRequest(
        language="python",
        code="",
        timeout_sec=0,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        limits=ResourceLimits(memory_mb=512),
    )


async def _starts(manager: SessionManager, starts: int) -> list[float]:
    """Seconds per start (each session stopped after, the first one kept)."""
    out = []
    for i in range(starts):
        await _ahead_ready(manager)
        began = time.perf_counter()
        await manager.start(f"b{i}", owner=None, request=_request())
        out.append(time.perf_counter() - began)
        if i:
            await manager.stop(f"b{i}", user=None)
    return out


async def _cells(manager: SessionManager, cells: int, folder: Path) -> tuple[list[float], ...]:
    """The same cell in session ``b0`` and in a plain ipykernel on the host (``ipc``
    sockets too), in turn: the machine's load weighs on both alike."""
    from jupyter_client.manager import AsyncKernelManager

    await _ahead_ready(manager)  # (not starting beside the cells)
    plain = AsyncKernelManager(transport="ipc", ip=str(folder / "k"))
    plain.connection_file = str(folder / "k.json")
    await plain.start_kernel(extra_arguments=["--HistoryManager.enabled=False"])
    client = plain.client()
    client.start_channels()
    core_s: list[float] = []
    plain_s: list[float] = []
    try:
        await client.wait_for_ready(timeout=60)
        spec = _cell("b0")
        for _ in range(cells):
            began = time.perf_counter()
            outcome = await manager.run_cell(spec, user=None)
            core_s.append(time.perf_counter() - began)
            assert outcome.result.exit_code == 0, outcome.result.stderr
            began = time.perf_counter()
            reply: dict[str, Any] = await client.execute_interactive(CELL, timeout=30)
            plain_s.append(time.perf_counter() - began)
            assert reply["content"]["status"] == "ok", reply
    finally:
        client.stop_channels()
        await plain.shutdown_kernel(now=True)
    return core_s, plain_s


async def _measure(starts: int, cells: int, folder: Path) -> dict[str, list[float]]:
    cold = SessionManager(SubprocessSandbox(pool=PoolConfig(mode="off")))
    try:
        cold_s = await _starts(cold, max(3, starts // 3))
    finally:
        await cold.aclose()
    manager = SessionManager(SubprocessSandbox(pool=PoolConfig(mode="auto")))
    try:
        # (The first start has no kernel ahead yet: it is a cold one.)
        start_s = (await _starts(manager, starts + 1))[1:]
        core_s, plain_s = await _cells(manager, cells, folder)
    finally:
        await manager.aclose()
    return {"start": start_s, "cold": cold_s, "cell": core_s, "plain": plain_s}


def measure(starts: int, cells: int) -> dict[str, list[float]]:
    """Seconds per session start (a kernel started ahead, and cold: the pool off), per warm
    cell in a session, per plain ipykernel cell."""
    with tempfile.TemporaryDirectory(prefix="gitpilot-bench-kernel-") as folder:
        return asyncio.run(_measure(starts, cells, Path(folder)))


def run(ctx: Context) -> list[Measure]:
    """The medians, against the issue's targets."""
    found = measure(ctx.n(10), ctx.n(200))
    start, cold = median(found["start"]) * 1000, median(found["cold"]) * 1000
    cell, plain = median(found["cell"]) * 1000, median(found["plain"]) * 1000
    ratio = cell / plain if plain else 0.0
    load = f"load {loadavg()[0]:.1f}"
    return [
        Measure(
            BENCH,
            "session start, a kernel started ahead (pool auto), median",
            round(start, 1),
            "ms",
            target="<= 300 ms",
            ok=start <= 300,
            note=f"{len(found['start'])} starts, bwrap, each once the one ahead was up; {load}",
        ),
        Measure(
            BENCH,
            "session start, cold (pool off: run started, kernel answering), median",
            round(cold, 1),
            "ms",
            note=f"{len(found['cold'])} starts, bwrap",
        ),
        Measure(
            BENCH,
            "warm cell round trip through the core, median",
            round(cell, 2),
            "ms",
            note=f"{len(found['cell'])} cells of {CELL!r}",
        ),
        Measure(
            BENCH,
            "plain ipykernel cell round trip (host, ipc), median",
            round(plain, 2),
            "ms",
            note=f"{len(found['plain'])} cells",
        ),
        Measure(
            BENCH,
            "warm cell: core / plain ipykernel",
            round(ratio, 2),
            "x",
            target="<= 1.5 x (over REST, later)",
            ok=ratio <= 1.5,
            note="the REST face's plan + approve + run comes on top",
        ),
    ]


def main() -> None:
    """Print the numbers of one measurement."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--cells", type=int, default=200)
    args = parser.parse_args()
    found = measure(args.starts, args.cells)
    for name, values in found.items():
        ms = sorted(v * 1000 for v in values)
        print(f"{name:6} median {median(ms):8.2f} ms  min {ms[0]:8.2f}  max {ms[-1]:8.2f}")
    print(f"load {loadavg()}")


if __name__ == "__main__":
    main()
