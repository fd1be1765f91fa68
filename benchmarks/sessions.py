"""Benchmark 15, sessions (issue #32, the core only): start time and a warm cell's round trip.

A session's start is ``SessionManager.start`` until the kernel answers (its run
started as a cold run is, the kernel's imports, the client connected). A warm cell
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
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
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


async def _sessions(starts: int, cells: int) -> tuple[list[float], list[float]]:
    manager = SessionManager(SubprocessSandbox())
    request = RunRequest(
        language="python",
        code="",
        timeout_sec=0,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        limits=ResourceLimits(memory_mb=512),
    )
    start_s, cell_s = [], []
    try:
        for i in range(starts):
            began = time.perf_counter()
            await manager.start(f"b{i}", owner=None, request=request)
            start_s.append(time.perf_counter() - began)
            if i:
                await manager.stop(f"b{i}", user=None)
        spec = _cell("b0")
        for _ in range(cells):
            began = time.perf_counter()
            outcome = await manager.run_cell(spec, user=None)
            cell_s.append(time.perf_counter() - began)
            assert outcome.result.exit_code == 0, outcome.result.stderr
    finally:
        await manager.aclose()
    return start_s, cell_s


async def _plain(cells: int, folder: Path) -> list[float]:
    """A plain ipykernel on the host, on ``ipc`` sockets too: the same cell's round trip."""
    from jupyter_client.manager import AsyncKernelManager

    manager = AsyncKernelManager(transport="ipc", ip=str(folder / "k"))
    manager.connection_file = str(folder / "k.json")
    await manager.start_kernel(extra_arguments=["--HistoryManager.enabled=False"])
    client = manager.client()
    client.start_channels()
    out: list[float] = []
    try:
        await client.wait_for_ready(timeout=60)
        for _ in range(cells):
            began = time.perf_counter()
            reply: dict[str, Any] = await client.execute_interactive(CELL, timeout=30)
            out.append(time.perf_counter() - began)
            assert reply["content"]["status"] == "ok", reply
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)
    return out


def measure(starts: int, cells: int) -> dict[str, list[float]]:
    """Seconds per session start, per warm cell in a session, per plain ipykernel cell."""
    start_s, cell_s = asyncio.run(_sessions(starts, cells))
    with tempfile.TemporaryDirectory(prefix="gitpilot-bench-kernel-") as folder:
        plain_s = asyncio.run(_plain(cells, Path(folder)))
    return {"start": start_s, "cell": cell_s, "plain": plain_s}


def run(ctx: Context) -> list[Measure]:
    """The medians, against the issue's targets."""
    found = measure(ctx.n(10), ctx.n(200))
    start = median(found["start"]) * 1000
    cell, plain = median(found["cell"]) * 1000, median(found["plain"]) * 1000
    ratio = cell / plain if plain else 0.0
    load = f"load {loadavg()[0]:.1f}"
    return [
        Measure(
            BENCH,
            "session start (core: run started, kernel answering), median",
            round(start, 1),
            "ms",
            target="<= 300 ms",
            ok=start <= 300,
            note=f"{len(found['start'])} starts, bwrap, cold (no kernel started ahead); {load}",
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
