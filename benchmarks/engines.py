"""Benchmark 11, engines: a run per engine, cold and warm, against a bare spawn.

The subprocess backend itself (no server, no plan), one run of ``print(2+2)`` at a
time, every path in turn in one loop (drift in the machine's load hits them alike):
a bare spawn of the same interpreter on the same file in a fresh folder, then per
engine (``bwrap``, ``landlock``) a cold run (pool off) and a warm run (pool
``always``, the next slot ready before it: 30 ms apart). An engine this host or
user cannot use is a row saying why. The namespace-free engine needs a user its runs
can start the interpreter as: run this as the docker-group user (or ``--stay-root``),
see docs/dev/benchmarks.md. Then a cold landlock run and a bare spawn, in turn, split
at the snippet's first instruction (before it: the spawn, the wall and the interpreter's
start; after it: its end, the exit's report and the answer). Then the cold landlock
run's own work, phase by phase:
the wall's rules worked out, the ruleset built, the whole ``prepare``, and the
spawn of ``/bin/true`` behind the wall three ways: the server's own fork with the
wall's ``preexec_fn`` (a warm slot's), through the launcher (a cold run's, to its
exit), and a bare ``vfork`` for scale; and the session scan every answer waits for.

    python -m benchmarks.engines [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local import landlock, nsfree
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.isolation import Launch
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.pool import PoolConfig

from .common import Context, Measure, median, percentile, rss_kb

BENCH = "engines"
CODE = "print(2+2)"
ENGINES = ("bwrap", "landlock")
#: The issue's target for a cold run of the namespace-free engine.
LANDLOCK_COLD_TARGET = 1.3
#: A snippet that prints when its first instruction ran.
STAMP = "import time; print(time.perf_counter())"
#: The pause before each path (a warm slot's replacement is ready by then).
PAUSE_SEC = 0.03


def _bare(interpreter: str, code: str = CODE) -> tuple[float, bytes]:
    """Seconds to run ``interpreter inline.py`` in a fresh folder (what a run does, bare),
    and its output."""
    folder = Path(tempfile.mkdtemp(prefix="gitpilot-bench-bare-"))
    try:
        (folder / "inline.py").write_text(code)
        started = time.perf_counter()
        done = subprocess.run(
            [interpreter, "inline.py"], cwd=folder, capture_output=True, check=True
        )
        elapsed = time.perf_counter() - started
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if code == CODE:
        assert done.stdout == b"4\n", done
    return elapsed, done.stdout


def _backend(engine: str, pool: str) -> tuple[SubprocessSandbox | None, str]:
    isolator = LayeredIsolator(engine)
    if isolator.engine != engine:
        gaps = isolator.report()["unavailable"]
        named = [g["reason"] for g in gaps if g["layer"] == engine]
        reason = (named or [g["reason"] for g in gaps] or ["unavailable"])[0]
        return None, reason
    backend = SubprocessSandbox(isolator=isolator, pool=PoolConfig(mode=pool))
    if pool != "off" and backend.pool_error() is not None:
        return None, f"no pool: {backend.pool_error()}"
    return backend, ""


async def _timed(backend: SubprocessSandbox, *, warm: bool) -> float:
    request = RunRequest(language="python", code=CODE, timeout_sec=30, limits=ResourceLimits())
    started = time.perf_counter()
    result = await backend.run(request)
    elapsed = time.perf_counter() - started
    assert (result.exit_code, result.stdout) == (0, "4\n"), result.stderr
    assert result.warm is warm, f"warm={result.warm}: {result.stderr}"
    return elapsed


async def _compare(runs: int) -> tuple[dict[str, list[float]], dict[str, str]]:
    interpreter = sys.executable
    paths: dict[str, SubprocessSandbox] = {}
    missing: dict[str, str] = {}
    for engine in ENGINES:
        for pool, name in (("off", "cold"), ("always", "warm")):
            backend, why = _backend(engine, pool)
            if backend is None:
                missing[f"{engine} {name}"] = why
            else:
                paths[f"{engine} {name}"] = backend
    samples: dict[str, list[float]] = {"bare": [], **{name: [] for name in paths}}
    try:
        for i in range(runs + 3):  # three to warm up: imports, probes, the first slots
            await asyncio.sleep(PAUSE_SEC)
            bare, _ = _bare(interpreter)
            if i >= 3:
                samples["bare"].append(bare)
            for name, backend in paths.items():
                await asyncio.sleep(PAUSE_SEC)
                elapsed = await _timed(backend, warm=name.endswith("warm"))
                if i >= 3:
                    samples[name].append(elapsed)
    finally:
        for backend in paths.values():
            await backend.aclose()
    return samples, missing


async def _split(runs: int) -> dict[str, list[float]]:
    """Where a cold landlock run's time goes against a bare spawn's, split at the
    snippet's first instruction (it prints ``time.perf_counter()``, the clock every
    process shares): before it (spawn, wall, the interpreter's start) and after it (the
    interpreter's end, the exit's report, the kill, the answer). Empty: no landlock."""
    backend, _ = _backend("landlock", "off")
    if backend is None:
        return {}
    names = (
        "bare spawn: to the snippet's first instruction",
        "bare spawn: from it to the exit",
        "landlock cold: to the snippet's first instruction",
        "landlock cold: from it to the answer",
    )
    split: dict[str, list[float]] = {name: [] for name in names}
    request = RunRequest(language="python", code=STAMP, timeout_sec=30, limits=ResourceLimits())
    try:
        for i in range(runs + 3):
            await asyncio.sleep(PAUSE_SEC)
            started = time.perf_counter()
            elapsed, out = _bare(sys.executable, STAMP)
            first = float(out) - started
            await asyncio.sleep(PAUSE_SEC)
            started = time.perf_counter()
            result = await backend.run(request)
            answered = time.perf_counter() - started
            assert result.exit_code == 0, result.stderr
            walled = float(result.stdout) - started
            if i >= 3:
                for name, seconds in zip(
                    names, (first, elapsed - first, walled, answered - walled), strict=True
                ):
                    split[name].append(seconds)
    finally:
        await backend.aclose()
    return split


async def _through_launcher(launch: Launch, folder: Path) -> float:
    """Seconds to start ``/bin/true`` as ``launch``'s cold run is started, to its exit."""
    launch.argv = ["/bin/true"]
    started = time.perf_counter()
    child = await launch.start(cwd=str(folder), env={}, stdin=False)
    assert child is not None, "the namespace-free engine's launch starts itself"
    code = await child.wait()
    elapsed = time.perf_counter() - started
    child.close_pipes()
    assert code == 0, code
    return elapsed


def _wall_phases(runs: int) -> dict[str, list[float]]:
    """The cold landlock run's own steps, each timed alone (empty: no landlock here)."""
    isolator = LayeredIsolator("landlock")
    phases: dict[str, list[float]] = {
        "rules worked out (kept scan)": [],
        "ruleset built in full (now after the run before)": [],
        "prepare (spare ruleset and cgroup, rlimits)": [],
        "spawn of /bin/true with the wall's preexec_fn (fork)": [],
        "spawn of /bin/true through the launcher (a cold run's)": [],
        "spawn of /bin/true, no preexec_fn (vfork)": [],
        "the end's session scan (getsid of every process)": [],
    }
    if isolator.engine != "landlock":
        return {}
    argv = [sys.executable, "inline.py"]
    dirs, files = isolator.hidden_paths()
    names = list(phases)
    for _ in range(runs):
        folder = Path(tempfile.mkdtemp(prefix="gitpilot-bench-wall-"))
        try:
            t0 = time.perf_counter()
            rules, _ = nsfree.fs_rules(argv[0], folder, [*dirs, *files])
            t1 = time.perf_counter()
            os.close(landlock.ruleset(rules, deny_tcp=True, scoped=True))
            t2 = time.perf_counter()
            launch = isolator.prepare(
                argv, workdir=folder, allow_network=False, limits=ResourceLimits()
            )
            t3 = time.perf_counter()
            subprocess.run(["/bin/true"], preexec_fn=launch.preexec_fn, cwd=folder, check=True)
            t4 = time.perf_counter()
            launched = asyncio.run(_through_launcher(launch, folder))
            t5 = time.perf_counter()
            subprocess.run(["/bin/true"], cwd=folder, check=True)
            t6 = time.perf_counter()
            nsfree.session_members(os.getpid())
            t7 = time.perf_counter()
            launch.cleanup()  # builds the next run's ruleset (not timed: after the answer)
            steps = (t1 - t0, t2 - t1, t3 - t2, t4 - t3, launched, t6 - t5, t7 - t6)
            for name, seconds in zip(names, steps, strict=True):
                phases[name].append(seconds)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    return phases


def measure(runs: int) -> list[Measure]:
    """The rows of this benchmark."""
    samples, missing = asyncio.run(_compare(runs))
    bare = median(samples["bare"])
    out = [
        Measure(BENCH, "bare spawn of python inline.py", round(bare * 1000, 1), "ms", note="median")
    ]
    for engine in ENGINES:
        for name in ("cold", "warm"):
            path = f"{engine} {name}"
            if path in missing:
                out.append(Measure(BENCH, f"{path} / bare spawn", 0, "x", note=missing[path]))
                continue
            seconds = median(samples[path])
            ratio = seconds / bare
            limit = LANDLOCK_COLD_TARGET if path == "landlock cold" else None
            out.append(
                Measure(
                    BENCH,
                    f"{path} / bare spawn",
                    round(ratio, 2),
                    "x",
                    target=f"<= {limit}x" if limit else "",
                    ok=ratio <= limit if limit else None,
                    note=f"{seconds * 1000:.1f} ms vs {bare * 1000:.1f} ms",
                )
            )
            if limit:
                # The runs least disturbed by other work on a shared machine (the verdict
                # stays the median's).
                quiet, quiet_bare = percentile(samples[path], 10), percentile(samples["bare"], 10)
                out.append(
                    Measure(
                        BENCH,
                        f"{path} / bare spawn, quietest tenth (10th percentiles)",
                        round(quiet / quiet_bare, 2),
                        "x",
                        note=f"{quiet * 1000:.1f} ms vs {quiet_bare * 1000:.1f} ms",
                    )
                )
    for phase, values in asyncio.run(_split(runs)).items():
        out.append(Measure(BENCH, phase, round(median(values) * 1000, 2), "ms", note="median"))
    for phase, values in _wall_phases(max(10, runs // 2)).items():
        if values:
            out.append(
                Measure(
                    BENCH,
                    f"landlock cold: {phase}",
                    round(median(values) * 1000, 2),
                    "ms",
                    note=f"median, in this process (RSS {rss_kb(os.getpid())[0] // 1024} MB)",
                )
            )
    return out


def run(ctx: Context) -> list[Measure]:
    """All engine measurements (see the module docstring)."""
    return measure(ctx.n(40))


def main() -> None:
    """Print the rows (for comparing checkouts; ``make bench`` writes the results)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.engines")
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    for m in measure(args.runs):
        print(f"{m.name}: {m.value:g} {m.unit} {m.target} {m.note}")


if __name__ == "__main__":
    main()
