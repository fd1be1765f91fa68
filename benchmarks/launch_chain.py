"""Where a cold launch of the bwrap chain spends its time: per exec, per mount, per write.

Launches ``true`` through the full chain ``LayeredIsolator("auto").prepare`` builds
(mount namespace, staging shell with the cgroup join and rlimits, setpriv, bwrap, seccomp),
first untraced (the wall time a run pays), then under ``strace -f -ttt -T`` to
split it: each step of the chain (from its ``execve`` to the next one of the
same process), each helper the staging shell forks (``mount``, ``install``, ...)
from ``execve`` to exit, and the slow system calls (the cgroup join's writes,
mounts). strace slows every step, so its numbers only say where the time goes;
the untraced medians are the real cost.

``python -m benchmarks.launch_chain [--runs N] [--network] [--compare-groups]
[--compare-join]`` prints the table. As a user that is not root, the chain's user
namespace is made through the setuid ``newuidmap``/``newgidmap``, which do not run
setuid under strace: only the untraced times are measured then. ``--compare-groups``
(not root) launches that chain and the one such a server has without them
(``--map-root-user``, groups kept) in turn, and prints both medians.
``--compare-join`` (cgroup v1) launches the chain as it is (the staging shell moves
itself through ``tasks``) and the same chain joining through ``cgroup.procs`` in
turn, 30 ms apart as runs come at a user's pace (the ``cgroup.procs`` write waits for
an RCU grace period unless another one came just before).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from gitpilot_jupyter.sandbox.backend import ResourceLimits
from gitpilot_jupyter.sandbox.local import namespaces
from gitpilot_jupyter.sandbox.local.confine import without_idmap
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator

from .common import Context, Measure

BENCH = "cold launch chain"
_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
_EXEC = re.compile(r'execve\("([^"]+)", \[(.*?)\]')
_DURATION = re.compile(r"<(\d+\.\d+)>$")
#: The system calls whose cost is reported (besides the execs they frame).
_SLOW = ("mount", "umount2", "unshare", "clone", "clone3", "write", "setns", "pivot_root")
_TRACED = ",".join(("execve", "exit_group", *_SLOW))


def _launch(
    isolator: LayeredIsolator,
    network: bool,
    trace: Path | None,
    rewrite: Callable[[list[str]], list[str]] | None = None,
) -> tuple[float, float]:
    """(prepare seconds, child seconds) of one launch of ``true`` (its argv ``rewrite``n)."""
    workdir = Path(tempfile.mkdtemp(prefix="gitpilot-chain-"))
    true = shutil.which("true") or "/bin/true"
    try:
        t0 = time.perf_counter()
        launch = isolator.prepare(
            [true], workdir=workdir, allow_network=network, limits=ResourceLimits()
        )
        t1 = time.perf_counter()
        argv = launch.argv if rewrite is None else rewrite(launch.argv)
        if trace is not None:
            argv = ["strace", "-f", "-ttt", "-T", "-e", f"trace={_TRACED}", "-o", str(trace), *argv]
        proc = subprocess.Popen(argv, cwd=workdir, preexec_fn=launch.preexec_fn)
        launch.on_started(proc.pid)
        code = proc.wait()
        t2 = time.perf_counter()
        launch.cleanup()
        if code != 0:
            raise RuntimeError(f"the chain exited with {code}")
        return t1 - t0, t2 - t1
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _label(path: str, args: str) -> str:
    name = Path(path).name
    words = re.findall(r'"((?:[^"\\]|\\.)*)"', args)[1:]
    if name == "mount":
        kinds = {"--bind": "--bind", "--move": "--move", "--all": "--all (fstab)"}
        kind = next((kinds[w] for w in words if w in kinds), "tmpfs")
        return f"mount {kind}"
    if name == "sh":
        script = words[1] if len(words) > 1 else ""
        return "sh (stage)" if script.startswith("set -e") else "sh (join/limits)"
    return name


def _split(trace: Path) -> dict[str, float]:
    """Seconds per step of one traced launch (repeated helpers are summed)."""
    out: dict[str, float] = defaultdict(float)
    current: dict[int, tuple[str, float]] = {}
    last = 0.0
    for raw in trace.read_text().splitlines():
        match = _LINE.match(raw)
        if match is None:
            continue
        pid, stamp, rest = int(match[1]), float(match[2]), match[3]
        last = stamp
        exe = _EXEC.match(rest)
        if exe is not None and "= -1" not in rest:
            if pid in current:
                label, started = current[pid]
                out[f"exec {label}"] += stamp - started
            current[pid] = (_label(exe[1], exe[2]), stamp)
            continue
        duration = _DURATION.search(rest)
        call = rest.split("(", 1)[0]
        if duration is not None and call in _SLOW:
            # A shell's slow write is its join of the run cgroup (the RCU wait).
            out[f"syscall {call}"] += float(duration[1])
        if rest.startswith(("exit_group", "+++ exited")) and pid in current:
            label, started = current.pop(pid)
            out[f"exec {label}"] += stamp - started
    for label, started in current.values():
        out[f"exec {label}"] += last - started
    return out


def compare_groups(runs: int, network: bool) -> dict[str, list[float]]:
    """Untraced launch times of the chain that drops the groups and of the one that keeps
    them (what a server that is not root has without newuidmap), in turn."""
    isolator = LayeredIsolator("auto")
    _launch(isolator, network, None)  # probes and caches outside the measure
    tool, _ = namespaces.detect("bwrap")
    if tool is None or tool.confine is None or tool.confine.idmap is None:
        raise SystemExit("--compare-groups: this server's chain has no newuidmap step")
    chains = {"drops groups": tool.confine, "keeps groups": without_idmap(tool.confine, "bench")}
    out: dict[str, list[float]] = {name: [] for name in chains}
    for i in range(runs):
        for name in sorted(chains, reverse=bool(i % 2)):
            tool.confine = chains[name]  # this process only
            out[name].append(_launch(isolator, network, None)[1])
    return out


def _join_by_procs(argv: list[str]) -> list[str]:
    """``argv`` with its cgroup join through ``cgroup.procs`` (the whole process, after the
    global lock) instead of ``tasks``."""
    return [a.replace("/tasks\n", "/cgroup.procs\n") for a in argv]


def compare_join(runs: int, network: bool) -> dict[str, list[float]]:
    """Untraced launch times with the join through ``tasks`` and through ``cgroup.procs``,
    in turn, each 30 ms after the last launch."""
    isolator = LayeredIsolator("auto")
    _launch(isolator, network, None)  # probes and caches outside the measure
    tree, _ = isolator._cgroups()
    if tree is None or tree.version != 1:
        raise SystemExit("--compare-join: no cgroup v1 run cgroups here")
    ways = {"tasks": None, "cgroup.procs": _join_by_procs}
    out: dict[str, list[float]] = {name: [] for name in ways}
    for i in range(runs):
        for name in sorted(ways, reverse=bool(i % 2)):
            time.sleep(0.03)
            out[name].append(_launch(isolator, network, None, ways[name])[1])
    return out


def measure(runs: int, network: bool) -> tuple[list[float], list[float], dict[str, list[float]]]:
    """Untraced prepare and child times, and traced per-step times, interleaved."""
    isolator = LayeredIsolator("auto")
    _launch(isolator, network, None)  # probes and caches outside the measure
    tool, _ = namespaces.detect("bwrap")
    chain = tool.confine if tool is not None else None
    prepare, child = [], []
    steps: dict[str, list[float]] = defaultdict(list)
    setuid = chain is not None and chain.idmap is not None and os.geteuid() != 0
    traced = shutil.which("strace") is not None and not setuid
    with tempfile.TemporaryDirectory(prefix="gitpilot-trace-") as tmp:
        for i in range(runs):
            p, c = _launch(isolator, network, None)
            prepare.append(p)
            child.append(c)
            if traced:
                trace = Path(tmp) / f"{i}.txt"
                _launch(isolator, network, trace)
                for name, seconds in _split(trace).items():
                    steps[name].append(seconds)
    return prepare, child, steps


def run(ctx: Context) -> list[Measure]:
    """Median milliseconds of the chain, untraced, and of each step under strace."""
    out = []
    for network in (False, True):
        prepare, child, steps = measure(ctx.n(25), network)
        tag = "network on" if network else "network off"
        out.append(Measure(BENCH, f"prepare ({tag})", _ms(prepare), "ms", note="server side"))
        out.append(Measure(BENCH, f"launch `true` ({tag})", _ms(child), "ms", note="untraced"))
        for name, values in sorted(steps.items()):
            out.append(Measure(BENCH, f"{name} ({tag})", _ms(values), "ms", note="under strace"))
    try:
        joins = compare_join(ctx.n(25), False)
    except SystemExit:
        return out  # not cgroup v1: nothing to compare
    for name, values in joins.items():
        note = "the chain as it is" if name == "tasks" else "the same chain, old join"
        out.append(
            Measure(
                BENCH,
                f"launch `true`, cgroup v1 join through {name} (network off)",
                _ms(values),
                "ms",
                note=f"untraced, interleaved, 30 ms apart; {note}",
            )
        )
    return out


def _ms(values: list[float]) -> float:
    return round(statistics.median(values) * 1000, 2) if values else 0.0


def main() -> None:
    """Print the table for one setting."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.launch_chain")
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--network", action="store_true")
    parser.add_argument("--json", action="store_true", help="raw seconds, for comparisons")
    parser.add_argument(
        "--compare-groups",
        action="store_true",
        help="not root: the chain with and without newuidmap (groups dropped/kept), in turn",
    )
    parser.add_argument(
        "--compare-join",
        action="store_true",
        help="cgroup v1: the join through tasks and through cgroup.procs, in turn",
    )
    args = parser.parse_args()
    if args.compare_groups or args.compare_join:
        compare = compare_groups if args.compare_groups else compare_join
        for name, values in compare(args.runs, args.network).items():
            print(f"launch `true` untraced, {name:13s} {_ms(values):8.2f} ms  (n={len(values)})")
        return
    prepare, child, steps = measure(args.runs, args.network)
    if args.json:
        print(json.dumps({"prepare": prepare, "launch": child, **steps}))
        return
    print(f"prepare (server side)   {_ms(prepare):8.2f} ms")
    print(f"launch `true` untraced  {_ms(child):8.2f} ms")
    for name, values in sorted(steps.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"{name:40s} {_ms(values):8.2f} ms  (n={len(values)}, under strace)")


if __name__ == "__main__":
    main()
