"""Benchmark 2, concurrency: 32 ``sleep 1`` snippets at once, and ``GET /status`` meanwhile.

The 32 plans are planned and approved first; then the 32 runs are sent at
once while a poller asks for the status every 20 ms. The wall time counts from
sending the runs to the last answer.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tests.support.live_server import LiveServer

from .common import Context, Measure, percentile, plan_and_approve

BENCH = "concurrency"
SNIPPETS = 32
CODE = "sleep 1"
#: The server's caps let all of them in (benchmarks/capacity.py measures it saturated).
CAPS = (f"--SandboxApp.max_concurrent_runs={SNIPPETS}", "--SandboxApp.memory_budget_mb=0")


async def poll_status(http: httpx.AsyncClient, stop: asyncio.Event, latencies: list[float]) -> None:
    """Ask for the status every 20 ms until ``stop``; each answer's latency in ``latencies``."""
    while not stop.is_set():
        started = time.perf_counter()
        answer = await http.get("/api/sandbox/status")
        latencies.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text
        await asyncio.sleep(0.02)


async def burst(
    server: LiveServer, tokens: list[str]
) -> tuple[float, list[float], list[dict[str, Any]]]:
    """Send the approved runs at once, poll the status meanwhile: wall, latencies, results."""
    latencies: list[float] = []
    stop = asyncio.Event()
    async with server.async_client() as http, server.async_client() as poll_http:
        await poll_http.get("/api/sandbox/status")  # open the poller's connection first
        poller = asyncio.create_task(poll_status(poll_http, stop, latencies))
        started = time.perf_counter()
        answers = await asyncio.gather(
            *(http.post("/api/sandbox/run", json={"approval_token": token}) for token in tokens)
        )
        wall = time.perf_counter() - started
        stop.set()
        await poller
    results = [a.json() for a in answers]
    return wall, latencies, results


def run(ctx: Context) -> list[Measure]:
    """32 concurrent runs: wall time, status latency while they run."""
    server = ctx.server("auto", *CAPS)
    with server.client() as http:
        http.get("/api/sandbox/status")
        tokens = [plan_and_approve(http, "bash", CODE) for _ in range(SNIPPETS)]
    wall, latencies, results = asyncio.run(burst(server, tokens))
    failed = [r for r in results if r.get("exit_code") != 0]
    p99 = percentile(latencies, 99)
    return [
        Measure(
            BENCH,
            f"{SNIPPETS} concurrent `sleep 1`: wall time",
            round(wall, 3),
            "s",
            target="<= 1.5 s",
            ok=wall <= 1.5 and not failed,
            note=f"{len(failed)} failed; OS isolation on",
        ),
        Measure(
            BENCH,
            "GET /status p99 while they run",
            round(p99 * 1000, 1),
            "ms",
            target="<= 50 ms",
            ok=p99 <= 0.05,
            note=f"{len(latencies)} requests, p50 {percentile(latencies, 50) * 1000:.1f} ms",
        ),
    ]
