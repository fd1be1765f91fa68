"""Batch plans and reports as plain text, the same in a terminal and a notebook."""

from __future__ import annotations

from typing import Any

from .plan import BatchPlan

#: How many item ids a list in the summary names before it says "and N more".
SHOWN_IDS = 10


def _ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:SHOWN_IDS])
    return shown + (f" and {len(ids) - SHOWN_IDS} more" if len(ids) > SHOWN_IDS else "")


def batch_plan_text(batch: BatchPlan) -> str:
    """The approver's view: count, languages, the inputs, the scan summary, the blocked items."""
    s = batch.summary()
    langs = ", ".join(f"{n} {lang}" for lang, n in sorted(s["languages"].items()))
    first = next(iter(batch.items.values()))
    mixed = len({p.spec.timeout_sec for p in batch.items.values()}) > 1
    lines = [
        f"Batch {batch.batch_id}: {s['count']} snippets ({langs})",
        f"  backend {', '.join(s['backends'])} · timeout {first.spec.timeout_sec} s per item"
        + (" (some items set their own)" if mixed else "")
        + f" · network {'on' if first.spec.network else 'off'} · deadline {batch.deadline_sec} s",
        f"  digest {batch.digest}",
    ]
    given = [p.spec.inputs for p in batch.items.values() if p.spec.inputs]
    if given:
        names = sorted({one.name for inputs in given for one in inputs})
        lines.append(f"  inputs: {len(given)} item(s) get files: {_ids(names)} (--show ID)")
    if not s["warnings"]:
        lines.append("  scan: no warnings")
    for w in s["warnings"]:
        lines.append(f"  warning ({w['severity']}): {w['label']}: {w['items']} item(s)")
    if s["high_risk"]:
        lines.append(f"  high-risk items: {_ids(s['high_risk'])}")
    if s["blocked"]:
        blocked = [b["id"] for b in s["blocked"]]
        lines.append(f"  BLOCKED (never run): {len(blocked)}: {_ids(blocked)}")
        for b in s["blocked"][:SHOWN_IDS]:
            lines.append(f"    {b['id']}: {b['reason']}")
    lines.append(f"  {s['runnable']} of {s['count']} will run")
    return "\n".join(lines)


def item_text(batch: BatchPlan, item_id: str) -> str:
    """One item opened: its plan and its code."""
    plan = batch.item(item_id)
    lines = [
        (
            f"Item {item_id}: {plan.spec.language} · timeout {plan.spec.timeout_sec} s · "
            f"network {'on' if plan.spec.network else 'off'} · digest {plan.digest}"
        ),
    ]
    if plan.file:
        lines.append(f"  file {plan.file}")
    for w in plan.warnings:
        lines.append(f"  warning ({w['severity']}): {w['label']}: {w['detail']}")
    if plan.blocked:
        lines.append(f"  BLOCKED: {plan.blocked_reason}")
    if plan.spec.stdin is not None:
        lines.append(f"  stdin: {len(plan.spec.stdin)} characters")
    lines += [f"  {one.label()}" for one in plan.spec.inputs]
    lines.append("-" * 60)
    lines.append(plan.spec.code.rstrip("\n"))
    lines.append("-" * 60)
    return "\n".join(lines)


def report_text(report: dict[str, Any]) -> str:
    """The last lines after a batch: counts, where results are, what did not run and why.

    The counts are those of the report: over the whole results file once the face
    has counted them there (``counted_over_file``), so a resumed batch
    says what its file holds, e.g. ``31 failed · 1 blocked · 268 ok (300 already done)``.
    """
    parts = [
        f"{report[name]} {name.replace('_', ' ')}"
        for name in ("failed", "timed_out", "blocked", "error")
        if report[name]
    ]
    parts.append(
        f"{report['ok']} ok" + (f" ({report['skipped']} already done)" if report["skipped"] else "")
    )
    lines = [
        f"[batch] {report['total']} item{'' if report['total'] == 1 else 's'} · "
        + " · ".join(parts)
        + f" · {report['elapsed_sec']:.1f} s on {report['executor']}"
    ]
    if report["out"]:
        lines.append(f"[batch] results in {report['out']}")
    if report["stopped"]:
        why = "the batch deadline passed" if report["stopped"] == "deadline" else "stopped"
        lines.append(
            f"[batch] {why}: {len(report['not_run'])} item(s) not run "
            f"({_ids(report['not_run'])}); run the same command again to resume"
        )
    if report["lost"]:
        lines.append(
            f"[batch] {len(report['lost'])} item(s) lost with their worker "
            f"({_ids(report['lost'])}) were not recorded: a rerun tries them again"
        )
    return "\n".join(lines)


#: The table's first columns, what a teacher reads; then the rest of the envelope.
TABLE_FIRST = ("id", "status", "exit_code", "summary", "duration_ms", "stdout", "stderr")
#: The table's last columns: the ids and digests that tie a row to its plan and audit lines.
TABLE_LAST = ("run_id", "plan_id", "sandbox_id", "digest")


def summary_line(record: dict[str, Any]) -> str:
    """What an item said, in one line: the last line of its output (of stderr first when it
    failed: the error), else why it did not run."""
    streams = ("stdout", "stderr") if record.get("status") == "ok" else ("stderr", "stdout")
    for name in (*streams, "reason", "error"):
        lines = str(record.get(name) or "").strip().splitlines()
        if lines:
            return lines[-1].strip()
    return ""


def table_rows(records: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """The results as a table: its columns (what a teacher reads first) and one row per record."""
    rows = [{**record, "summary": summary_line(record)} for record in records]
    seen = dict.fromkeys(key for row in rows for key in row)
    first = [name for name in TABLE_FIRST if name in seen]
    last = [name for name in TABLE_LAST if name in seen]
    columns = first + [name for name in seen if name not in first and name not in last] + last
    return columns, [{name: row.get(name) for name in columns} for row in rows]
