"""Where the time of one run goes: the phases of the subprocess backend, measured alone.

Measured in this process after it has grown to the size of a running Jupyter
server (``--rss``, default 120 MB), because the cost of ``fork`` grows with it:
a launch with a ``preexec_fn`` (cgroup join, rlimits) cannot use ``vfork`` and
copies the page tables of the whole server, on its event loop. The same launch
without the ``preexec_fn`` shows what that costs.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gitpilot_jupyter.sandbox.backend import ResourceLimits
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator

from .common import Context, Measure, median

BENCH = "profile of one run"
SERVER_RSS_MB = 120


async def _spawn(
    argv: list[str], workdir: Path, preexec_fn: Callable[[], None] | None
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        cwd=workdir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )


async def _phases(isolation: str, runs: int) -> dict[str, list[float]]:
    isolator = LayeredIsolator(isolation)
    phases: dict[str, list[float]] = {k: [] for k in ("prepare", "spawn", "spawn-no-preexec")}
    phases.update({"child": [], "cleanup": []})
    for _ in range(runs):
        workdir = Path(tempfile.mkdtemp(prefix="gitpilot-bench-"))
        (workdir / "inline.py").write_text("print(2+2)")
        t0 = time.perf_counter()
        launch = isolator.prepare(
            [sys.executable, "inline.py"],
            workdir=workdir,
            allow_network=False,
            limits=ResourceLimits(),
        )
        t1 = time.perf_counter()
        proc = await _spawn(launch.argv, workdir, launch.preexec_fn)
        t2 = time.perf_counter()
        await proc.communicate()
        t3 = time.perf_counter()
        launch.cleanup()
        t4 = time.perf_counter()
        plain = await _spawn(launch.argv, workdir, None)
        t5 = time.perf_counter()
        await plain.communicate()
        shutil.rmtree(workdir, ignore_errors=True)
        for name, seconds in (
            ("prepare", t1 - t0),
            ("spawn", t2 - t1),
            ("child", t3 - t2),
            ("cleanup", t4 - t3),
            ("spawn-no-preexec", t5 - t4),
        ):
            phases[name].append(seconds)
    return phases


def run(ctx: Context) -> list[Measure]:
    """Median milliseconds of each phase, with and without namespaces."""
    ballast = bytearray(SERVER_RSS_MB * 1024 * 1024)
    ballast[::4096] = b"\x01" * len(ballast[::4096])  # touch every page: resident
    measures = []
    for isolation in ("none", "auto"):
        phases = asyncio.run(_phases(isolation, ctx.n(30)))
        for name, values in phases.items():
            blocking = name in ("prepare", "spawn", "cleanup", "spawn-no-preexec")
            measures.append(
                Measure(
                    BENCH,
                    f"{name} ({'OS isolation' if isolation == 'auto' else 'no OS isolation'})",
                    round(median(values) * 1000, 1),
                    "ms",
                    note=("blocks the event loop" if blocking else "child runs; loop is free")
                    + f"; process RSS {SERVER_RSS_MB} MB",
                )
            )
    del ballast
    return measures
