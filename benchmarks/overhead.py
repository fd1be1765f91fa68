"""Benchmark 1, overhead: plan + approve + run of ``print(2+2)`` against a bare spawn.

Side by side in one loop (so drift in machine load hits every path alike): the
same interpreter spawned directly, the REST path on a server without OS
isolation (``GITPILOT_SANDBOX_ISOLATION=none``) and with it (``auto``). Then, in
one kernel: a plain cell, ``%%sandbox`` (core in-process, and through the
server's REST API) and IPython's own ``%%script python``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from jupyter_client.manager import start_new_kernel

from .common import Context, Measure, bare_spawn, median, rest_run

CODE = "print(2+2)"
BENCH = "overhead"


def _ratio_row(name: str, seconds: float, bare: float, limit: float | None, note: str) -> Measure:
    ratio = seconds / bare
    return Measure(
        BENCH,
        f"{name} / bare spawn",
        round(ratio, 2),
        "x",
        target=f"<= {limit}x" if limit else "",
        ok=ratio <= limit if limit else None,
        note=f"{seconds * 1000:.1f} ms vs {bare * 1000:.1f} ms; {note}",
    )


def rest_paths(ctx: Context) -> list[Measure]:
    """Bare spawn vs the REST path, without and with OS isolation."""
    samples: dict[str, list[float]] = {"bare": [], "none": [], "auto": [], "off": []}
    # The "none" server's administrator allows off (it is not allowed by default).
    allow_off = ("--SandboxApp.allowed_backends=subprocess", "--SandboxApp.allowed_backends=off")
    clients = {"none": ctx.server("none", *allow_off).client(), "auto": ctx.server("auto").client()}
    # "off": the same server path with no isolation and no limits (no preexec_fn either).
    paths = [("none", "none", None), ("auto", "auto", None), ("off", "none", "off")]
    try:
        for _ in range(3):  # warm up: imports, probes, caches
            bare_spawn(CODE)
            for _name, iso, backend in paths:
                rest_run(clients[iso], "python", CODE, **({"backend": backend} if backend else {}))
        for _ in range(ctx.n(60)):
            samples["bare"].append(bare_spawn(CODE))
            for name, iso, backend in paths:
                extra = {"backend": backend} if backend else {}
                started = time.perf_counter()
                result = rest_run(clients[iso], "python", CODE, **extra)
                samples[name].append(time.perf_counter() - started)
                assert result["stdout"] == "4\n", result
    finally:
        for http in clients.values():
            http.close()
    bare = median(samples["bare"])
    layers = {iso: ctx.layers(iso) for iso in ("none", "auto")}
    return [
        Measure(BENCH, "bare spawn of python -c", round(bare * 1000, 1), "ms", note="median"),
        _ratio_row(
            "REST, no OS isolation", median(samples["none"]), bare, 1.25, ",".join(layers["none"])
        ),
        _ratio_row(
            "REST, OS isolation", median(samples["auto"]), bare, 1.5, ",".join(layers["auto"])
        ),
        _ratio_row(
            "REST, backend off (reference)",
            median(samples["off"]),
            bare,
            None,
            "no isolation, no limits, no preexec_fn: what the three HTTP calls cost",
        ),
    ]


def _cell_seconds(kc: Any, code: str, expect: str, runs: int) -> float:
    """Median wall time of executing ``code`` until the kernel is idle again."""
    seen: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            seen.append(msg["content"]["text"])
        if msg["msg_type"] == "error":
            seen.append("\n".join(msg["content"]["traceback"]))

    times = []
    for i in range(runs + 2):
        seen.clear()
        started = time.perf_counter()
        reply = kc.execute_interactive(code, timeout=120, output_hook=hook)
        elapsed = time.perf_counter() - started
        output = "".join(seen)
        if reply["content"]["status"] != "ok" or expect not in output:
            raise RuntimeError(f"cell failed: {code!r}: {output}")
        if i >= 2:  # the first two warm up the magic and its client
            times.append(elapsed)
    return median(times)


def kernel_paths(ctx: Context) -> list[Measure]:
    """In one kernel: plain cell, %%sandbox (in-process and REST), %%script python."""
    server = ctx.server("auto")
    km, kc = start_new_kernel(kernel_name="python3", env={**server.env, "JUPYTER_TOKEN": ""})
    try:
        runs = ctx.n(40)
        setup = "%load_ext gitpilot_jupyter\n%config SandboxMagics.show_footer = False"
        kc.execute_interactive(setup, timeout=60)
        plain = _cell_seconds(kc, CODE, "4", runs)
        script = _cell_seconds(kc, f"%%script {sys.executable}\n{CODE}", "4", runs)
        kc.execute_interactive("%config SandboxMagics.server = 'local'", timeout=30)
        local = _cell_seconds(kc, f"%%sandbox\n{CODE}", "4", runs)
        kc.execute_interactive(
            f"%config SandboxMagics.server = '{server.url}'\n"
            f"%config SandboxMagics.server_token = '{server.token}'",
            timeout=30,
        )
        rest = _cell_seconds(kc, f"%%sandbox\n{CODE}", "4", runs)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    bare = median([bare_spawn(CODE) for _ in range(ctx.n(30))])
    return [
        Measure(BENCH, "kernel: plain cell", round(plain * 1000, 1), "ms", note="round trip"),
        _ratio_row("kernel: %%script python", script, bare, None, "no isolation at all"),
        _ratio_row("kernel: %%sandbox, core in-process", local, bare, None, "OS isolation"),
        _ratio_row("kernel: %%sandbox via REST", rest, bare, None, "OS isolation"),
        Measure(
            BENCH,
            "kernel: %%sandbox in-process / %%script python",
            round(local / script, 2),
            "x",
            note="the price of plan + approve + isolation in a notebook",
        ),
    ]


def run(ctx: Context) -> list[Measure]:
    """All overhead measurements."""
    return rest_paths(ctx) + kernel_paths(ctx)
