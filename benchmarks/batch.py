"""Benchmark 8, batch throughput: snippets per second on this machine and on Dask.

The same batch of short Python snippets (``print(i * i)``, OS isolation on) runs
three ways, each into a fresh results file: the default executor (a pool of
one run per core on this machine), a Dask cluster of one worker process with
one thread, and a Dask cluster of two such workers (a scheduler and workers as
separate processes, as separate machines would be). The clock runs from the
plan's approval to the last result written; the Dask times include connecting
to the scheduler but not starting it. One worker vs two on the same 2-core
machine shows what a second node adds; the docs' scaling argument uses it.
"""

from __future__ import annotations

import time
from typing import Any

from gitpilot_jupyter.sandbox.batch import read_results, run_batch
from tests.support.dask_cluster import dask_processes

from .common import Context, Measure

BENCH = "batch"
SNIPPETS = 200


def _items(n: int) -> list[dict[str, Any]]:
    return [{"id": f"n{i}", "language": "python", "code": f"print({i} * {i})"} for i in range(n)]


def _throughput(ctx: Context, name: str, n: int, **where: Any) -> tuple[float, int]:
    out = ctx.workdir / f"batch-{name}.jsonl"
    started = time.perf_counter()
    for _ in run_batch(_items(n), out=out, **where):
        pass
    wall = time.perf_counter() - started
    ok = sum(1 for r in read_results(out) if r["status"] == "ok")
    return wall, ok


def run(ctx: Context) -> list[Measure]:
    """Snippets per second: local pool, one Dask worker, two Dask workers."""
    n = ctx.n(SNIPPETS)
    figures: dict[str, tuple[float, int]] = {}
    figures["local"] = _throughput(ctx, "local", n)
    for workers in (1, 2):
        with dask_processes(ctx.workdir / f"dask-{workers}", workers=workers, threads=1) as dask:
            figures[f"dask{workers}"] = _throughput(ctx, f"dask{workers}", n, cluster=dask.access)
    measures = []
    labels = {
        "local": "this machine, one run per core (default)",
        "dask1": "Dask, 1 worker x 1 thread",
        "dask2": "Dask, 2 workers x 1 thread",
    }
    for key, (wall, ok) in figures.items():
        measures.append(
            Measure(
                BENCH,
                f"{n} snippets: {labels[key]}",
                round(ok / wall, 1),
                "snippets/s",
                target=f"{n}/{n} ok",
                ok=ok == n,
                note=f"{wall:.2f} s wall, {ok}/{n} ok",
            )
        )
    one, two = (figures[k][1] / figures[k][0] for k in ("dask1", "dask2"))
    measures.append(
        Measure(
            BENCH,
            "two Dask workers vs one: speed-up",
            round(two / one, 2),
            "x",
            note="both workers share this machine's 2 cores; separate machines bring their own",
        )
    )
    return measures
