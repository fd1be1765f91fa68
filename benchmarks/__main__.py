"""``python -m benchmarks [--quick] [--only NAME ...]``: run the benchmarks, write the results.

Each benchmark is a module with ``run(ctx) -> list[Measure]``. A benchmark that
fails is reported as such in the table; the others still run.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .common import Context, Measure, loadavg, machine
from .report import write

BENCHMARKS = (
    "overhead",
    "concurrency",
    "capacity",
    "flood",
    "timeouts",
    "streaming",
    "peers",
    "profile_run",
    "launch_chain",
    "batch",
    "pool",
    "core_overhead",
    "engines",
    "lab_flood",
    "display",
)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks side by side in one process; 1 if one of them crashed."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run)")
    parser.add_argument("--only", nargs="+", choices=BENCHMARKS, help="run only these")
    parser.add_argument("--out", type=Path, help="results folder (default benchmarks/results)")
    args = parser.parse_args(argv)
    meta = machine()
    meta["quick"] = args.quick
    measures: list[Measure] = []
    crashed = False
    with tempfile.TemporaryDirectory(prefix="gitpilot-bench-") as tmp:
        ctx = Context(Path(tmp), quick=args.quick)
        try:
            for name in args.only or BENCHMARKS:
                print(f"bench: {name} ...", flush=True)
                started = time.perf_counter()
                try:
                    found = importlib.import_module(f"benchmarks.{name}").run(ctx)
                except Exception as exc:
                    crashed = True
                    traceback.print_exc()
                    found = [Measure(name, "crashed", 0, "", ok=False, note=repr(exc)[:200])]
                for m in found:
                    print(f"  {m.name}: {m.value:g} {m.unit} {m.target} {m.note}", flush=True)
                print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
                measures += found
        finally:
            ctx.close()
    meta["loadavg_after"] = loadavg()
    meta["finished"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    table = write(measures, meta, *([args.out] if args.out else []))
    print(f"bench: results in {table} and {table.with_suffix('.json')}")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
