"""Benchmark 9, the warm pool: issue #16's target table, side by side in one run.

Every ratio is to a bare spawn of the same interpreter (``python -c 'print(2+2)'``)
measured in the same interleaved loop, so drift in machine load hits every path
alike. Servers: one with the pool (``--SandboxApp.pool=auto``, python slots with their
interpreter started ahead: ``pool_prestart``), one without
(every run cold, a pool miss). In-process: the core's ``plan_and_run``
(plan, approve, run) with and without a pool. In one kernel: IPython's
``%%script python`` against ``%%sandbox`` through the pooled server and with the
core in the kernel. Then 32 concurrent ``sleep 1`` on the pooled server (warm:
after a first burst taught the pool the demand), the phases of a warm run, and
the memory an idle slot holds.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from jupyter_client.manager import start_new_kernel

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox, remove_run
from gitpilot_jupyter.sandbox.local.launches import _descendants
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.pool import (
    PRESTART_ENV,
    PoolConfig,
    PoolKey,
    Slot,
    WarmChild,
    WarmPool,
)
from gitpilot_jupyter.sandbox.local.supervise import end_run
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore

from .common import Context, Measure, bare_spawn, median, percentile, plan_and_approve, rest_run
from .concurrency import CAPS, burst

BENCH = "pool"
CODE = "print(2+2)"
SNIPPETS = 32
#: Room for the burst's key (32 at once, plus one) and the python runs' (two) together,
#: and caps that let the 32 in.
POOLED = (
    "--SandboxApp.pool=auto",
    f"--SandboxApp.pool_max_slots={SNIPPETS + 3}",
    "--SandboxApp.pool_prestart=True",
    *CAPS,
)


def _ratio(
    name: str, seconds: float, bare: float, target: str, ok: bool | None, note: str
) -> Measure:
    return Measure(
        BENCH,
        f"{name} / bare spawn",
        round(seconds / bare, 2),
        "x",
        target=target,
        ok=ok,
        note=f"{seconds * 1000:.1f} ms vs {bare * 1000:.1f} ms; {note}",
    )


def _service(ctx: Context, mode: str) -> SandboxService:
    folder = ctx.workdir / f"service-{mode}"
    config = PoolConfig(mode=mode, prestart=True)
    return SandboxService(settings=SettingsStore(folder), pool=config)


def rest_and_in_process(ctx: Context) -> list[Measure]:
    """Bare spawn, REST warm and cold, in-process warm and cold: one interleaved loop.

    The REST client is :class:`RestClient` (the standard library's, each request in one
    write): what is timed is the server and the wire, not a client library (``httpx``
    adds ~0.7 ms per request of its own).
    """
    warm_http = ctx.rest("auto", *POOLED)
    cold_http = ctx.rest("auto")
    services = {"warm": _service(ctx, "auto"), "cold": _service(ctx, "off")}
    loop = asyncio.new_event_loop()
    samples: dict[str, list[float]] = {
        k: [] for k in ("bare", "bare at once", "rest warm", "rest cold", "here warm", "here cold")
    }
    warm_hits = {"rest warm": 0, "here warm": 0}

    def here(kind: str) -> dict[str, Any]:
        planned = loop.run_until_complete(
            services[kind].plan_and_run(RunOptions(language="python", code=CODE), confirmed=True)
        )
        assert planned.result is not None
        return planned.result.to_dict()

    paths = {
        "rest warm": lambda: rest_run(warm_http, "python", CODE),
        "rest cold": lambda: rest_run(cold_http, "python", CODE),
        "here warm": lambda: here("warm"),
        "here cold": lambda: here("cold"),
    }
    try:
        for _ in range(5):  # warm up: imports, probes, caches, the pools' demand
            bare_spawn(CODE)
            for call in paths.values():
                call()
        runs = ctx.n(60)
        for _ in range(runs):
            # Also right after the last path's run, with the cores still busy with its
            # end and caches warm (how this table measured it before 2026-12-01).
            samples["bare at once"].append(bare_spawn(CODE))
            # Every path, the baseline included, starts after the same pause.
            time.sleep(0.03)
            samples["bare"].append(bare_spawn(CODE))
            for name, call in paths.items():
                time.sleep(0.03)  # a user's pace, not a flood: the pool refills between
                started = time.perf_counter()
                result = call()
                samples[name].append(time.perf_counter() - started)
                assert result["stdout"] == "4\n", result
                if name in warm_hits:
                    warm_hits[name] += bool(result.get("warm"))
    finally:
        warm_http.close()
        cold_http.close()
        for service in services.values():
            loop.run_until_complete(service.aclose())
        loop.close()
    bare = median(samples["bare"])
    hits = {k: f"{v}/{runs} runs warm" for k, v in warm_hits.items()}
    rest_warm, rest_cold = median(samples["rest warm"]), median(samples["rest cold"])
    here_warm, here_cold = median(samples["here warm"]), median(samples["here cold"])
    return [
        Measure(
            BENCH,
            "bare spawn of python -c",
            round(bare * 1000, 1),
            "ms",
            note="median, after the same 30 ms pause as every path below; "
            f"{median(samples['bare at once']) * 1000:.1f} ms right after the previous run",
        ),
        _ratio(
            "REST plan + approve + run, warm",
            rest_warm,
            bare,
            "<= 1.0x",
            rest_warm <= bare,
            f"full containment; {hits['rest warm']}; standard-library keep-alive client",
        ),
        _ratio(
            "in-process run, warm",
            here_warm,
            bare,
            "<= 0.5x",
            here_warm <= 0.5 * bare,
            f"core's plan + approve + run; {hits['here warm']}",
        ),
        _ratio(
            "REST, cold (pool miss)",
            rest_cold,
            bare,
            "<= 2.0x",
            rest_cold <= 2 * bare,
            "full containment, pool off: the launch chain on the run's path",
        ),
        _ratio(
            "in-process run, cold (pool miss)",
            here_cold,
            bare,
            "<= 2.0x",
            here_cold <= 2 * bare,
            "full containment, pool off",
        ),
    ]


#: The same magic a second time, on the core in the kernel: both paths alternate in one kernel.
_LOCAL_MAGIC = """
from gitpilot_jupyter.kernel.magics import SandboxMagics as _SandboxMagics
_local = _SandboxMagics(shell=get_ipython(), server="local", show_footer=False)
get_ipython().register_magic_function(_local.sandbox_cell, "cell", "sandbox_local")
"""
#: Prints the pool counters of both paths (REST: the server's; local: the kernel's).
_POOL_COUNTS = """
import json as _json
from gitpilot_jupyter.sandbox.sync import run_sync as _run_sync
_m = [c for c in get_ipython().configurables if type(c).__name__ == "SandboxMagics"][0]
_pools = {"rest": _m.client, "local": _local.client}
_pools = {k: _run_sync(c.status())["pool"] for k, c in _pools.items()}
print(_json.dumps({k: [v["hits"], v["misses"]] for k, v in _pools.items()}))
"""


def _cell(kc: Any, code: str, expect: str = "") -> tuple[float, str]:
    """Seconds from sending ``code`` until the kernel is idle again, and what it printed."""
    seen: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            seen.append(msg["content"]["text"])
        if msg["msg_type"] == "error":
            seen.append("\n".join(msg["content"]["traceback"]))

    started = time.perf_counter()
    reply = kc.execute_interactive(code, timeout=120, output_hook=hook)
    elapsed = time.perf_counter() - started
    output = "".join(seen)
    if reply["content"]["status"] != "ok" or expect not in output:
        raise RuntimeError(f"cell failed: {code!r}: {output}")
    return elapsed, output


def _interleaved(kc: Any, cells: dict[str, str], expect: str, runs: int) -> dict[str, float]:
    """Median seconds of each cell, the cells taken in turn (drift hits each alike)."""
    times: dict[str, list[float]] = {name: [] for name in cells}
    for turn in range(runs + 2):
        for name, code in cells.items():
            seconds, _ = _cell(kc, code, expect)
            if turn >= 2:  # the first two warm up each magic and its client
                times[name].append(seconds)
    return {name: median(values) for name, values in times.items()}


def kernel(ctx: Context) -> list[Measure]:
    """In one kernel: %%script python, %%sandbox through the server and in the kernel, in turn."""
    server = ctx.server("auto", *POOLED)
    env = {
        **server.env,
        "JUPYTER_TOKEN": "",
        "GITPILOT_SANDBOX_POOL": "auto",
        PRESTART_ENV: "1",
    }
    km, kc = start_new_kernel(kernel_name="python3", env=env)
    try:
        runs = ctx.n(40)
        # The server's URL as a kernel the server launched finds it ('auto').
        setup = (
            "%load_ext gitpilot_jupyter\n%config SandboxMagics.show_footer = False\n"
            f"%config SandboxMagics.server = '{server.url}'\n"
            f"%config SandboxMagics.server_token = '{server.token}'\n" + _LOCAL_MAGIC
        )
        _cell(kc, setup)
        cells = {
            "script": f"%%script {sys.executable}\n{CODE}",
            "rest": f"%%sandbox\n{CODE}",
            "local": f"%%sandbox_local\n{CODE}",
        }
        before = json.loads(_cell(kc, _POOL_COUNTS)[1])
        seconds = _interleaved(kc, cells, "4", runs)
        after = json.loads(_cell(kc, _POOL_COUNTS)[1])
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    script = seconds["script"]

    def row(path: str, name: str, note: str) -> Measure:
        hits, misses = (after[path][i] - before[path][i] for i in (0, 1))
        value = seconds[path]
        return Measure(
            BENCH,
            name,
            round(value / script, 2),
            "x",
            target="< 1.0x",
            ok=value < script,
            note=f"{value * 1000:.1f} ms vs {script * 1000:.1f} ms, same kernel, cells in turn; "
            f"{note}; pool hits +{hits}, misses +{misses}",
        )

    return [
        row(
            "rest",
            "%%sandbox python (server, warm) / %%script python",
            "the default path of a kernel the server launched",
        ),
        row(
            "local",
            "%%sandbox python (core in the kernel, warm) / %%script python",
            "SandboxMagics.server = 'local'",
        ),
    ]


def concurrency(ctx: Context) -> list[Measure]:
    """32 concurrent ``sleep 1`` on the pooled server, once the pool knows the demand."""
    server = ctx.server("auto", *POOLED)
    with server.client() as http:
        first = [plan_and_approve(http, "bash", "sleep 1") for _ in range(SNIPPETS)]
        asyncio.run(burst(server, first))  # teaches the pool: 32 at once
        deadline = time.monotonic() + 120
        while http.get("/api/sandbox/status").json()["pool"]["idle"] < SNIPPETS:
            if time.monotonic() > deadline:
                raise RuntimeError("the pool did not refill to 32 slots in 120 s")
            time.sleep(0.2)
        tokens = [plan_and_approve(http, "bash", "sleep 1") for _ in range(SNIPPETS)]
    with server.client() as http:
        before = http.get("/api/sandbox/status").json()["pool"]
    wall, latencies, results = asyncio.run(burst(server, tokens))
    with server.client() as http:
        after = http.get("/api/sandbox/status").json()["pool"]
    failed = [r for r in results if r.get("exit_code") != 0]
    warm = sum(bool(r.get("warm")) for r in results)
    p99 = percentile(latencies, 99)
    return [
        Measure(
            BENCH,
            f"{SNIPPETS} concurrent `sleep 1`, warm: wall time",
            round(wall, 3),
            "s",
            target="<= 1.25 s",
            ok=wall <= 1.25 and not failed,
            note=f"{warm}/{SNIPPETS} warm, {len(failed)} failed; pool_max_slots={SNIPPETS + 3}, "
            f"{before['idle']} slots waiting before, hits +{after['hits'] - before['hits']}, "
            f"misses +{after['misses'] - before['misses']}",
        ),
        Measure(
            BENCH,
            "GET /status p99 while they run (and the pool refills)",
            round(p99 * 1000, 1),
            "ms",
            target="<= 50 ms",
            ok=p99 <= 0.05,
            note=f"{len(latencies)} requests, p50 {percentile(latencies, 50) * 1000:.1f} ms",
        ),
    ]


async def _learned(backend: SubprocessSandbox, code: str) -> tuple[WarmPool, PoolKey]:
    """The backend's pool and the key of python runs of ``code``, after one such run
    (the pool learns the key and starts its slots)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    request = RunRequest(language="python", code=code, timeout_sec=10, env=env)
    interpreter = backend.interpreters.resolve("python")
    assert interpreter is not None
    pool = backend.pool()
    assert pool is not None
    await backend.run(request)
    return pool, backend._key(request, interpreter)


async def _quiet(pool: WarmPool) -> None:
    """Until a slot waits and none is starting (no refill beside the measured run)."""
    while pool.idle() < 1 or pool.starting():
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


async def _handed(slot: Slot, code: str) -> WarmChild:
    """What the backend does to hand a warm slot its run: read its pipes, deliver the code."""
    child = await slot.hand_out()
    rest = slot.send_now(code)
    if rest:
        await slot.deliver(rest)
    return child


async def _answer(slot: Slot, child: WarmChild) -> None:
    """What the backend does before a warm run that ended answers: make sure nothing is
    left (:func:`end_run`), let go of fds."""
    await end_run(slot.launch, child, ended=True)
    child.close_pipes()
    slot.close_fds()


def _remove(slot: Slot) -> None:
    """What the backend does after the answer (:func:`remove_run`), here in turn."""
    remove_run(slot.launch, slot.workdir, slot)


async def _profile(backend: SubprocessSandbox, runs: int) -> dict[str, list[float]]:
    """The phases of warm runs, done step by step as the backend does them."""
    phases: dict[str, list[float]] = {"take": [], "deliver": [], "child": [], "end": []}
    after: list[float] = []
    pool, key = await _learned(backend, CODE)
    for _ in range(runs):
        await _quiet(pool)
        t0 = time.perf_counter()
        slot = pool.take(key)
        t1 = time.perf_counter()
        assert slot is not None
        child = await _handed(slot, CODE)
        t2 = time.perf_counter()
        assert child.stdout is not None
        out = await child.stdout.read()
        await child.wait()
        t3 = time.perf_counter()
        await _answer(slot, child)
        t4 = time.perf_counter()  # the answer goes here; the rest is after it
        _remove(slot)
        after.append(time.perf_counter() - t4)
        pool.done(key)
        assert out == b"4\n", out
        for name, seconds in zip(phases, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            phases[name].append(seconds)
    phases["after the answer: cgroup, folder, mount namespace"] = after
    return phases


#: Stamps the start of the interpreter's exit (its last atexit call) on stderr.
EXIT_STAMP = (
    "import atexit, sys, time\n"
    "atexit.register(lambda: sys.stderr.write(repr(time.monotonic())))\n"
    "print(2+2)\n"
)
#: The same, in an interpreter that waited first, as a slot's does for its code.
EXIT_STAMP_AFTER_WAIT = "import time\ntime.sleep(0.3)\n" + EXIT_STAMP


async def _exit_tails(backend: SubprocessSandbox, runs: int) -> list[list[float]]:
    """From the interpreter's exit (its atexit) to the end of its output, in a warm slot,
    in a bare spawn and in a bare spawn that waited 0.3 s first, interleaved: what any
    python run pays after its code, which a pool cannot start ahead. (All read
    ``time.monotonic``: one clock, no time namespace.)
    """
    pool, key = await _learned(backend, EXIT_STAMP)
    warm: list[float] = []
    bare: list[float] = []
    waited: list[float] = []
    for _ in range(runs):
        await _quiet(pool)
        slot = pool.take(key)
        assert slot is not None
        child = await _handed(slot, EXIT_STAMP)
        assert child.stdout is not None and child.stderr is not None
        await child.stdout.read()
        stamp = await child.stderr.read()
        warm.append(time.monotonic() - float(stamp))
        await child.wait()
        await _answer(slot, child)
        _remove(slot)
        pool.done(key)
        await _quiet(pool)  # the refill done: the bare spawns have the cores to themselves
        for code, into in ((EXIT_STAMP, bare), (EXIT_STAMP_AFTER_WAIT, waited)):
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
            into.append(time.monotonic() - float(done.stderr))
    return [warm, bare, waited]


def _slot_memory(backend: SubprocessSandbox) -> tuple[float, float, int]:
    """Median PSS and RSS (MiB) of an idle slot's processes, and how many it has."""
    pool = backend.pool()
    assert pool is not None
    pss, rss, count = [], [], 0
    for queue in pool._idle.values():
        for slot in queue:
            pids = [slot.popen.pid, *_descendants(slot.popen.pid)]
            count = len(pids)
            kb = {"Pss:": 0, "Rss:": 0}
            for pid in pids:
                for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                    field = line.split()
                    if field and field[0] in kb:
                        kb[field[0]] += int(field[1])
            pss.append(kb["Pss:"] / 1024)
            rss.append(kb["Rss:"] / 1024)
    return median(pss), median(rss), count


def profile_and_memory(ctx: Context) -> list[Measure]:
    """Where a warm run's time goes; what an idle slot holds (network off and on)."""
    out: list[Measure] = []
    config = PoolConfig(mode="auto", max_slots=4, min_slots=4, prestart=True)
    backend = SubprocessSandbox(isolator=LayeredIsolator(), pool=config)
    bare = median([bare_spawn(CODE) for _ in range(ctx.n(30))])

    async def measure() -> tuple[dict[str, list[float]], tuple[float, float, int]]:
        try:
            phases = await _profile(backend, ctx.n(30))
            tails.extend(await _exit_tails(backend, ctx.n(30)))
            pool = backend.pool()
            assert pool is not None
            while pool.idle() < 4:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1)
            return phases, _slot_memory(backend)
        finally:
            await backend.aclose()

    tails: list[list[float]] = []
    phases, (pss, rss, count) = asyncio.run(measure())
    parts = ", ".join(f"{k} {median(v) * 1000:.2f} ms" for k, v in phases.items())
    total = sum(median(v) for k, v in phases.items() if not k.startswith("after"))
    out.append(
        Measure(
            BENCH,
            "warm run until its answer, phases (python, network off)",
            round(total * 1000, 1),
            "ms",
            note=f"{parts}; bare spawn {bare * 1000:.1f} ms (the interpreter started "
            "ahead: the child phase is the snippet's file, its run and the exit)",
        )
    )
    warm_tail, bare_tail, waited_tail = (median(t) for t in tails)
    out.append(
        Measure(
            BENCH,
            "python's exit to the end of its output, warm slot",
            round(warm_tail * 1000, 2),
            "ms",
            note=f"bare spawn {bare_tail * 1000:.2f} ms, bare spawn that waited 0.3 s first "
            f"{waited_tail * 1000:.2f} ms, interleaved: from the last atexit call (the "
            "interpreter's finalization and its process exit; the slot's pipes are the "
            "interpreter's alone) to the end of stderr = "
            f"{warm_tail / bare:.2f}x of a bare spawn, paid by every run, warm or not",
        )
    )
    out.append(
        Measure(
            BENCH,
            "idle slot memory (python, network off)",
            round(pss, 2),
            "MiB PSS",
            note=f"RSS {rss:.1f} MiB over {count} processes (bwrap's monitor, its init "
            "and the started interpreter waiting for the code); tmpfs: the hook only",
        )
    )
    net = SubprocessSandbox(isolator=LayeredIsolator(), pool=config)

    async def measure_net() -> tuple[float, float, int]:
        request = RunRequest(
            language="python",
            code=CODE,
            timeout_sec=10,
            allow_network=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        )
        try:
            await net.run(request)
            pool = net.pool()
            assert pool is not None
            while pool.idle() < 4:
                await asyncio.sleep(0.05)
            await asyncio.sleep(1)
            return _slot_memory(net)
        finally:
            await net.aclose()

    pss, rss, count = asyncio.run(measure_net())
    out.append(
        Measure(
            BENCH,
            "idle slot memory (network on: slirp4netns too)",
            round(pss, 2),
            "MiB PSS",
            note=f"RSS {rss:.1f} MiB over {count} processes",
        )
    )
    return out


def run(ctx: Context) -> list[Measure]:
    """The target table, the profile and the memory."""
    return rest_and_in_process(ctx) + kernel(ctx) + concurrency(ctx) + profile_and_memory(ctx)
