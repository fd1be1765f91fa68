"""``%sandbox batch SOURCE``: many snippets under one approval, from a notebook.

SOURCE is a variable holding a list of items (dicts with ``id``, ``language``,
``code``...) or the path of a JSONL file or a folder. The batch goes where
``%%sandbox`` cells go (the Jupyter server, under its policy and audit, or the
core in the kernel process, on this machine or on Dask with ``--cluster``),
shows a progress bar, and answers the results as a table (with ``--out``, the
whole file's: the rows of earlier runs too): a pandas DataFrame when pandas is
installed, else a list of dicts. Executing the cell approves the batch unless an
item has a high-severity warning: then an Approve / Reject card shows the plan
and those items' code, and runs the batch once ticked and approved (``--yes``
approves without the card, after a look with ``--show ID``). Interrupting the
kernel stops the batch and keeps what finished.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.display import display as _display

from ..client.base import SandboxClient
from ..client.batches import BatchWatch, approve_and_run_batch, final_report
from ..sandbox.batch import as_items, items_from_list
from ..sandbox.batch.cluster import add_tls_options, cluster_from_args
from ..sandbox.batch.render import batch_plan_text, item_text, report_text, table_rows
from ..sandbox.batch.runner import counted_over_file, held_records
from ..sandbox.request import RunOptions
from ..sandbox.sync import run_sync
from .views import NotebookViews, ProgressView

display: Callable[..., None] = _display

USAGE = (
    "%sandbox batch SOURCE [--each CMD] [--out FILE] [--workers N] [--cluster ADDRESS|local] "
    "[--tls-ca-file PEM --tls-cert PEM --tls-key PEM] [--timeout N] [--deadline SEC] "
    "[--backend B] [--network] [--env NAME] [--yes] [--plan] [--show ID]"
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit the kernel
        raise UsageError(f"sandbox batch: {message}; usage: {USAGE}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="%sandbox batch", add_help=False)
    p.add_argument("source")
    p.add_argument("--each")
    p.add_argument("--out")
    p.add_argument("--workers", type=int)
    p.add_argument("--cluster")
    add_tls_options(p)
    p.add_argument("--timeout", type=int)
    p.add_argument("--deadline", type=int)
    p.add_argument("--backend")
    p.add_argument("--network", dest="network", action="store_const", const=True, default=None)
    p.add_argument("--no-network", dest="network", action="store_const", const=False)
    p.add_argument("--env", action="append")
    p.add_argument("--yes", action="store_true")
    p.add_argument("--plan", action="store_true")
    p.add_argument("--show", action="append")
    return p


#: Whole numbers a row may lack (a blocked item never ran): nullable integers, not 0.0 and NaN.
WHOLE_NUMBER_COLUMNS = ("exit_code", "duration_ms")


def as_table(records: list[dict[str, Any]]) -> Any:
    """The records as a table, what a teacher reads first (id, status, exit code, summary,
    duration), ids and digests last: a pandas DataFrame when pandas is installed, else a list
    of dicts with their keys in that order."""
    columns, rows = table_rows(records)
    try:
        import pandas as pd
    except ImportError:
        return rows
    frame = pd.DataFrame(rows, columns=columns)
    for name in WHOLE_NUMBER_COLUMNS:
        if name in frame:
            frame[name] = frame[name].astype("Int64")
    return frame


def batch_line(
    user_ns: dict[str, Any],
    rest: list[str],
    views: NotebookViews,
    client: SandboxClient,
) -> Any:
    """Run ``%sandbox batch``; the results table (``None`` for ``--plan`` / ``--show`` / a card).

    ``views`` make the progress bar and, for a batch with high-risk items run without
    ``--yes``, the Approve / Reject card (then the table shows in the card). The batch
    goes through ``client``, the one ``%%sandbox`` cells use (the server's when they go
    there: its policy and its audit log).
    """
    args = _parser().parse_args(rest)
    source = user_ns.get(args.source) if args.source.isidentifier() else None
    if source is not None and not isinstance(source, (str, Path)):
        items = items_from_list(source)
    else:
        items = as_items(source if source is not None else args.source, args.each)
    options = RunOptions(
        timeout_sec=args.timeout,
        backend=args.backend,
        allow_network=args.network,
        env=args.env or (),
    )
    batch = run_sync(client.plan_batch(items, options, deadline_sec=args.deadline))
    if args.show:
        for item_id in args.show:
            print(item_text(batch, item_id))
        return None

    def run(bar: ProgressView) -> tuple[str, Any]:
        """Approve and run the batch with ``bar`` showing it; the report's text and the table."""
        watch = BatchWatch(on_progress=bar.update)
        with contextlib.suppress(KeyboardInterrupt):  # a stop keeps what finished
            run_sync(
                approve_and_run_batch(
                    client,
                    batch,
                    watch=watch,
                    out=args.out,
                    workers=args.workers,
                    cluster=cluster_from_args(args),
                )
            )
        report = final_report(client, batch, watch, args.out)
        records = watch.records
        if args.out is not None:  # the whole table: earlier runs' rows too, in the batch's order
            held = {str(record["id"]): record for record in held_records(batch, args.out)}
            records = [held[item_id] for item_id in batch.items if item_id in held]
            report = counted_over_file(report, records)
        if report["stopped"]:
            bar.stopped(report["stopped"])
        return report_text(report), as_table(records)

    if batch.summary()["high_risk"] and not args.yes and not args.plan:
        # A person decides, on a card showing the plan and the high-risk items' code.
        display(views.batch_approval_card(batch, run))
        return None
    print(batch_plan_text(batch))
    if args.plan:
        return None
    bar = views.batch_progress(batch.count)
    display(bar)
    said, table = run(bar)
    print(said)
    return table
