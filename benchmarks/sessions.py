"""Benchmark 15, sessions (issue #32): start time and a warm cell's round trip.

A session's start is ``SessionManager.start`` until the kernel answers: with a kernel
started ahead (the pool on, each start once the one ahead is up: a user's pace), and
cold (the pool off: its run started as a cold run is, the kernel's imports, the
client connected). A warm cell is ``SessionManager.run_cell`` of a one-line cell in a
started session, until its envelope is back (also with a 1 kB input, and writing a
1 kB file under ``out/``); the reference is the same cell sent by ``jupyter_client``
to a plain ipykernel on the host (no sandbox), until its reply and idle status. Over
REST (the issue's target), a warm cell is ``POST /plan`` with ``session``,
``POST /approve`` and ``POST /run`` by the token on one keep-alive connection to a
live server (pool auto), in turn with the same plain ipykernel cell.

    cd <checkout> && PYTHONPATH=$PWD .venv/bin/python -m benchmarks.sessions [--rest]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.inputs import InputCaps, resolve_inputs
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.pool import PoolConfig
from gitpilot_jupyter.sandbox.sessions import SessionManager
from gitpilot_jupyter.sandbox.spec import RunSpec

from .common import Context, Measure, loadavg, median, plan_and_approve

BENCH = "sessions"
CELL = "y = 2 + 2"
#: A cell that writes (again) one 1 kB file under out/: each one hands it back.
WRITE_OUT = (
    "import os\nos.makedirs('out', exist_ok=True)\n_ = open('out/o.txt', 'w').write('x' * 1000)"
)


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


async def _file_cells(manager: SessionManager, cells: int, folder: Path) -> tuple[list[float], ...]:
    """Warm cells of session ``b0`` with a 1 kB input (copied as approved, linked by the
    kernel), and cells that each write a 1 kB file under ``out/`` (collected after)."""
    (folder / "in.csv").write_bytes(b"x" * 1000)
    inputs = resolve_inputs(folder, ["in.csv"], caps=InputCaps())
    with_input = dataclasses.replace(_cell("b0"), inputs=inputs)
    writes = dataclasses.replace(_cell("b0"), code=WRITE_OUT)
    counter = iter(range(10**9))

    def out_folder() -> Path:
        made = folder / f"out-{next(counter)}"
        made.mkdir()
        return made

    in_s: list[float] = []
    out_s: list[float] = []
    for _ in range(cells):
        began = time.perf_counter()
        outcome = await manager.run_cell(with_input, user=None)
        in_s.append(time.perf_counter() - began)
        assert outcome.result.exit_code == 0, outcome.result.stderr
        began = time.perf_counter()
        outcome = await manager.run_cell(writes, user=None, out_folder=out_folder)
        out_s.append(time.perf_counter() - began)
        assert len(outcome.result.files) == 1, outcome.result.notes
    return in_s, out_s


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
        in_s, out_s = await _file_cells(manager, max(10, cells // 4), folder)
    finally:
        await manager.aclose()
    return {
        "start": start_s,
        "cold": cold_s,
        "cell": core_s,
        "plain": plain_s,
        "input": in_s,
        "out": out_s,
    }


def measure(starts: int, cells: int) -> dict[str, list[float]]:
    """Seconds per session start (a kernel started ahead, and cold: the pool off), per warm
    cell in a session, per plain ipykernel cell."""
    with tempfile.TemporaryDirectory(prefix="gitpilot-bench-kernel-") as folder:
        return asyncio.run(_measure(starts, cells, Path(folder)))


def rest_cells(ctx: Context, cells: int, folder: Path) -> tuple[list[float], list[float]]:
    """Seconds per warm session cell over REST (plan + approve + run by token) and per
    plain ipykernel cell, in turn."""
    from jupyter_client.manager import KernelManager

    plain = KernelManager(transport="ipc", ip=str(folder / "r"))
    plain.connection_file = str(folder / "r.json")
    plain.start_kernel(extra_arguments=["--HistoryManager.enabled=False"])
    client = plain.client()
    client.start_channels()
    client.wait_for_ready(timeout=60)
    rest_s: list[float] = []
    plain_s: list[float] = []
    try:
        with ctx.rest("auto", "--SandboxApp.pool=auto") as http:
            body = {"session": "bench"}
            # The first cell starts the session; the ones measured find it warm.
            first = http.post("/api/sandbox/run", json={"approval_token": _token(http, body)})
            assert first.json()["exit_code"] == 0, first.json()
            for _ in range(cells):
                began = time.perf_counter()
                answer = http.post("/api/sandbox/run", json={"approval_token": _token(http, body)})
                rest_s.append(time.perf_counter() - began)
                assert answer.json()["exit_code"] == 0, answer.json()
                began = time.perf_counter()
                reply: dict[str, Any] = client.execute_interactive(CELL, timeout=30)
                plain_s.append(time.perf_counter() - began)
                assert reply["content"]["status"] == "ok", reply
            http.request("DELETE", "/api/sandbox/sessions/bench")
    finally:
        client.stop_channels()
        plain.shutdown_kernel(now=True)
    return rest_s, plain_s


def _token(http: Any, extra: dict[str, Any]) -> str:
    return plan_and_approve(http, "python", CELL, **extra)


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
        _against_plain(
            "warm cell: core / plain ipykernel",
            ratio,
            "the core alone: the REST face's plan + approve + run comes on top (below)",
        ),
        Measure(
            BENCH,
            "warm cell with a 1 kB input through the core, median",
            round(median(found["input"]) * 1000, 2),
            "ms",
            note=f"{len(found['input'])} cells: copied as approved, linked by the kernel",
        ),
        Measure(
            BENCH,
            "warm cell writing a 1 kB out/ file through the core, median",
            round(median(found["out"]) * 1000, 2),
            "ms",
            note=f"{len(found['out'])} cells: the file collected after each",
        ),
        *rest_measures(ctx),
    ]


def _against_plain(name: str, ratio: float, note: str) -> Measure:
    """A ratio to the plain ipykernel cell, against the issue's 1.5x."""
    return Measure(BENCH, name, round(ratio, 2), "x", target="<= 1.5 x", ok=ratio <= 1.5, note=note)


def rest_measures(ctx: Context) -> list[Measure]:
    """A warm session cell over REST against a plain ipykernel cell (the issue's target)."""
    with tempfile.TemporaryDirectory(prefix="gitpilot-bench-kernel-") as folder:
        rest_s, plain_s = rest_cells(ctx, ctx.n(100), Path(folder))
    rest, plain = median(rest_s) * 1000, median(plain_s) * 1000
    ratio = rest / plain if plain else 0.0
    return [
        Measure(
            BENCH,
            "warm session cell over REST (plan + approve + run by token), median",
            round(rest, 2),
            "ms",
            note=f"{len(rest_s)} cells of {CELL!r}, keep-alive, load {loadavg()[0]:.1f}",
        ),
        _against_plain(
            "warm session cell over REST / plain ipykernel cell",
            ratio,
            f"plain ipykernel median {plain:.2f} ms, in turn with the REST cells",
        ),
    ]


def main() -> None:
    """Print the numbers of one measurement."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--starts", type=int, default=10)
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--rest", action="store_true", help="only the REST cells, on a live server")
    args = parser.parse_args()
    if args.rest:
        with tempfile.TemporaryDirectory(prefix="gitpilot-bench-") as workdir:
            ctx = Context(Path(workdir))
            try:
                for found_measure in rest_measures(ctx):
                    print(f"{found_measure.name:72} {found_measure.value} {found_measure.unit}")
            finally:
                ctx.close()
        return
    found = measure(args.starts, args.cells)
    for name, values in found.items():
        ms = sorted(v * 1000 for v in values)
        print(f"{name:6} median {median(ms):8.2f} ms  min {ms[0]:8.2f}  max {ms[-1]:8.2f}")
    print(f"load {loadavg()}")


if __name__ == "__main__":
    main()
