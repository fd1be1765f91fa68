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
    """The approver's view: count, languages, the scan summary, the blocked items."""
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
        f"Item {item_id}: {plan.spec.language} · timeout {plan.spec.timeout_sec} s · "
        f"network {'on' if plan.spec.network else 'off'} · digest {plan.digest}",
    ]
    if plan.file:
        lines.append(f"  file {plan.file}")
    for w in plan.warnings:
        lines.append(f"  warning ({w['severity']}): {w['label']}: {w['detail']}")
    if plan.blocked:
        lines.append(f"  BLOCKED: {plan.blocked_reason}")
    if plan.spec.stdin is not None:
        lines.append(f"  stdin: {len(plan.spec.stdin)} characters")
    lines.append("-" * 60)
    lines.append(plan.spec.code.rstrip("\n"))
    lines.append("-" * 60)
    return "\n".join(lines)


def report_text(report: dict[str, Any]) -> str:
    """The last lines after a batch: counts, where results are, what did not run and why."""
    parts = [f"{report['ok']} ok"]
    for name in ("failed", "timed_out", "blocked", "error", "skipped"):
        if report[name]:
            label = "already done (skipped)" if name == "skipped" else name.replace("_", " ")
            parts.append(f"{report[name]} {label}")
    lines = [
        f"[batch] {report['total']} items · "
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
