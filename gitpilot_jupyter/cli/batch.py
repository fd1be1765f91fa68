"""``jupyter sandbox batch``: many snippets under one approval, here or on a Dask cluster."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..client import resolve
from ..client.base import SandboxClient
from ..client.batches import BatchWatch, approve_and_run_batch, final_report
from ..client.server import TOKEN_ENV
from ..sandbox.batch import BatchPlan, BatchProgress, load_source
from ..sandbox.batch.cluster import add_tls_options, cluster_from_args
from ..sandbox.batch.render import batch_plan_text, item_text, report_text
from ..sandbox.batch.runner import counted_over_file, held_records
from ..sandbox.errors import InvalidRequest
from ..sandbox.request import RunOptions
from ..sandbox.sync import run_sync
from .commands import make_client

#: How often a progress line is printed when stderr is not a terminal.
PROGRESS_EVERY_SEC = 2.0
EXIT_INTERRUPTED = 130


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``batch``."""
    p = subparsers.add_parser(
        "batch",
        help="plan, approve once and run many snippets (JSONL file or folder)",
        description="Run every snippet of SOURCE under one approval. SOURCE is a JSONL file of "
        '{"id", "language", "code" | "file", "stdin"?, "timeout_sec"?} lines, or a folder '
        "(one item per file, by extension, or through --each). Results are appended to --out "
        "as each item finishes; running the same command again resumes (items already in "
        "--out with the same digest are skipped). Ctrl-C stops and keeps what finished.",
        epilog="Exit status (of the whole results file, earlier runs included): 0 when every "
        "item ran and exited 0; 1 when an item failed, timed out, was blocked or did not run; "
        "2 for a refused or invalid request; 130 when stopped.",
    )
    p.add_argument("source", metavar="FILE.jsonl|DIR", help="the snippets")
    p.add_argument(
        "--each",
        metavar="CMD",
        help="with a folder: run every file through this bash command; {file} is its name "
        "(e.g. --each 'python3 {file} < /dev/null')",
    )
    p.add_argument("--out", metavar="FILE", help="results JSONL, appended to (required to run)")
    p.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="items at a time on this machine, or LocalCluster workers (default: the cores)",
    )
    p.add_argument(
        "--cluster",
        metavar="ADDRESS|local",
        help="run on a Dask scheduler reached with mutual TLS (tls://host:8786, with the "
        "--tls-* options or Dask's TLS settings), or 'local' for a LocalCluster on loopback",
    )
    add_tls_options(p)
    p.add_argument(
        "--server",
        metavar="URL",
        help="run on this Jupyter server, under its policy and audit log (token: "
        f"{TOKEN_ENV} or JUPYTER_TOKEN); default: in this process",
    )
    p.add_argument("--timeout", type=int, help="seconds per item, 1..600 (default: the settings')")
    p.add_argument("--deadline", type=int, metavar="SEC", help="the whole batch's deadline")
    p.add_argument("--backend", help="subprocess, matrixlab or off (default: the settings')")
    net = p.add_mutually_exclusive_group()
    net.add_argument("--network", dest="network", action="store_true", default=None)
    net.add_argument("--no-network", dest="network", action="store_false")
    p.add_argument(
        "--env",
        action="append",
        metavar="NAME",
        help="pass this variable of your environment to every snippet (repeatable)",
    )
    p.add_argument("-y", "--yes", action="store_true", help="approve without asking")
    p.add_argument("--plan", action="store_true", help="show the plan only; run nothing")
    p.add_argument("--show", metavar="ID", action="append", help="open an item of the plan")
    p.add_argument("--json", action="store_true", help="plan / final report as JSON on stdout")
    p.set_defaults(handler=cmd_batch)


def _confirm(batch: BatchPlan, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        print(
            "error: this batch needs an approval; no terminal to ask on. "
            "Re-run with --yes to approve it.",
            file=sys.stderr,
        )
        return False
    while True:
        answer = input(
            f"Approve and run {batch.summary()['runnable']} snippets? "
            "[y/N, or an item id to open it] "
        ).strip()
        if answer.lower() in ("y", "yes"):
            return True
        if answer in batch.items:
            print(item_text(batch, answer), file=sys.stderr)
            continue
        return False


class _Progress:
    """Progress on stderr: one line rewritten on a terminal, a line every few seconds else."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def __call__(self, progress: BatchProgress) -> None:
        now = time.monotonic()
        if self.tty:
            sys.stderr.write(f"\r[batch] {progress.line()}\x1b[K")
        elif now - self.last >= PROGRESS_EVERY_SEC or progress.remaining == 0:
            sys.stderr.write(f"[batch] {progress.line()}\n")
        else:
            return
        self.last = now
        sys.stderr.flush()

    def end(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def cmd_batch(args: argparse.Namespace) -> int:
    """``jupyter sandbox batch``: plan, confirm, approve once, run, report."""
    client: SandboxClient = (
        make_client(pool="auto") if not args.server else resolve.make_client(args.server)
    )
    options = RunOptions(
        timeout_sec=args.timeout,
        backend=args.backend,
        allow_network=args.network,
        env=args.env or (),
    )
    items = load_source(args.source, args.each)
    batch = run_sync(client.plan_batch(items, options, deadline_sec=args.deadline))
    if args.show:
        for item_id in args.show:
            print(item_text(batch, item_id))
        return 0
    if args.plan:
        if args.json:
            json.dump(batch.to_dict(), sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print(batch_plan_text(batch))
        return 0
    if not args.out:
        raise InvalidRequest("give --out FILE for the results (or --plan to see the plan only)")
    print(batch_plan_text(batch), file=sys.stderr)
    if batch.requires_approval and not _confirm(batch, args.yes):
        return 2
    progress = _Progress()
    watch = BatchWatch(on_progress=progress)
    cluster = cluster_from_args(args)
    run = approve_and_run_batch(
        client, batch, watch=watch, out=args.out, workers=args.workers, cluster=cluster
    )
    try:
        run_sync(run)
    except KeyboardInterrupt:
        progress.end()
        _finish(
            _whole_file(final_report(client, batch, watch, args.out), batch, args.out), args.json
        )
        return EXIT_INTERRUPTED
    progress.end()
    report = _whole_file(final_report(client, batch, watch, args.out), batch, args.out)
    _finish(report, args.json)
    # What the file holds decides: a resumed batch whose earlier items failed still failed.
    clean = not report["stopped"] and report["ok"] == report["total"]
    return 0 if clean else 1


def _whole_file(report: dict[str, Any], batch: BatchPlan, out: str) -> dict[str, Any]:
    """The report counted over every item the results file holds (earlier runs too)."""
    return counted_over_file(report, held_records(batch, out))


def _finish(report: dict[str, Any], as_json: bool) -> None:
    print(report_text(report), file=sys.stderr)
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
