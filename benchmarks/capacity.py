"""Benchmark 2b, capacity: a server saturated past its caps, and ``GET /status`` meanwhile.

The server admits 8 runs at once (``--SandboxApp.max_concurrent_runs=8``). Eight
``sleep 3`` runs fill it; then 24 more clients keep asking to run, each asking
again after it is refused ``429 busy``, until the first of the eight ends, while
a poller asks for the status every 20 ms. Twice: clients that wait what the
answer's ``Retry-After`` says, and impatient ones that ask again after
:data:`IMPATIENT_SEC` (a refusal costs the server about what a status does).
Measured: the status latency while saturated, how fast a refusal answers, and
that the admitted runs all finished.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.support.live_server import LiveServer

from .common import Context, Measure, percentile, plan_and_approve
from .concurrency import poll_status

BENCH = "capacity"
CAP = 8
PRESSING = 24
CODE = "sleep 3"
CAPS = f"--SandboxApp.max_concurrent_runs={CAP}"
#: How soon an impatient refused client asks again.
IMPATIENT_SEC = 0.1
#: How long the idle server's status is polled first, for comparison.
IDLE_SEC = 1.0


async def _press(
    http: httpx.AsyncClient,
    token: str,
    stop: asyncio.Event,
    refusals: list[float],
    impatient: bool,
) -> None:
    """Ask to run ``token`` again and again while the server is full (each a 429), until
    the first admitted run ends (then one may get its slot: it is not a refusal)."""
    while not stop.is_set():
        started = time.perf_counter()
        answer = await http.post("/api/sandbox/run", json={"approval_token": token})
        if answer.status_code != 429:
            assert stop.is_set(), f"admitted past the cap: {answer.status_code} {answer.text[:200]}"
            return
        refusals.append(time.perf_counter() - started)
        await asyncio.sleep(IMPATIENT_SEC if impatient else int(answer.headers["Retry-After"]))


async def saturate(
    server: LiveServer, admitted: list[str], pressing: list[str], *, impatient: bool
) -> tuple[list[float], list[float], list[float], list[int]]:
    """Poll the idle server, fill it, press it, poll it: status latencies (saturated),
    refusal latencies, status latencies (idle), the admitted runs' exit codes."""
    latencies: list[float] = []
    refusals: list[float] = []
    idle: list[float] = []
    stop = asyncio.Event()
    async with server.async_client() as http, server.async_client() as poll_http:
        idle_stop = asyncio.Event()
        idle_poller = asyncio.ensure_future(poll_status(poll_http, idle_stop, idle))
        await asyncio.sleep(IDLE_SEC)
        idle_stop.set()
        await idle_poller
        runs = [
            asyncio.ensure_future(http.post("/api/sandbox/run", json={"approval_token": t}))
            for t in admitted
        ]
        while (await poll_http.get("/api/sandbox/status")).json()["capacity"]["runs"] < CAP:
            await asyncio.sleep(0.02)
        poller = asyncio.ensure_future(poll_status(poll_http, stop, latencies))
        pressers = [
            asyncio.ensure_future(_press(http, t, stop, refusals, impatient)) for t in pressing
        ]
        await asyncio.wait(runs, return_when=asyncio.FIRST_COMPLETED)
        stop.set()  # a slot is free: saturated no more
        await asyncio.gather(poller, *pressers)
        answers = await asyncio.gather(*runs)
    return latencies, refusals, idle, [a.json().get("exit_code", -1) for a in answers]


def run(ctx: Context) -> list[Measure]:
    """8 runs admitted, 24 clients refused again and again: status and refusal latency."""
    return [m for impatient in (False, True) for m in _scenario(ctx, impatient=impatient)]


def _scenario(ctx: Context, *, impatient: bool) -> list[Measure]:
    server = ctx.server("auto", CAPS)
    with server.client() as http:
        http.get("/api/sandbox/status")
        admitted = [plan_and_approve(http, "bash", f"{CODE} # {i}") for i in range(CAP)]
        pressing = [plan_and_approve(http, "bash", f"{CODE} # p{i}") for i in range(PRESSING)]
    latencies, refusals, idle, codes = asyncio.run(
        saturate(server, admitted, pressing, impatient=impatient)
    )
    failed = sum(code != 0 for code in codes)
    p99 = percentile(latencies, 99)
    refusal_p99 = percentile(refusals, 99)
    clients = f"retrying every {IMPATIENT_SEC} s" if impatient else "waiting Retry-After"
    return [
        Measure(
            BENCH,
            f"GET /status p99 while saturated ({CAP} runs; {PRESSING} clients {clients})",
            round(p99 * 1000, 1),
            "ms",
            target="<= 50 ms",
            ok=p99 <= 0.05 and not failed,
            note=f"{len(latencies)} requests, p50 {percentile(latencies, 50) * 1000:.1f} ms; "
            f"idle p50 {percentile(idle, 50) * 1000:.1f} ms, p99 {percentile(idle, 99) * 1000:.1f} "
            f"ms; {failed} admitted runs failed",
        ),
        Measure(
            BENCH,
            f"429 busy answer p99 while saturated ({clients})",
            round(refusal_p99 * 1000, 1),
            "ms",
            target="<= 50 ms",
            ok=refusal_p99 <= 0.05,
            note=f"{len(refusals)} refusals, p50 {percentile(refusals, 50) * 1000:.1f} ms",
        ),
    ]
