"""Human-readable output of the CLI (plans, results, status)."""

from __future__ import annotations

import sys
from typing import TextIO

from ..sandbox.display import PREVIEW_LINES, code_preview, escape_text
from ..sandbox.plans import ExecutionPlan
from ..sandbox.records import Status
from ..sandbox.report import backend_name, footer, status_text
from ..sandbox.results import RunResult, result_badges

__all__ = ["print_plan", "print_plan_code", "print_result_footer", "print_status", "result_badges"]


def print_plan(plan: ExecutionPlan, stream: TextIO = sys.stdout) -> None:
    """The plan as a short block of text (control and bidi characters shown as escapes)."""
    w = stream.write
    w(f"Plan {plan.plan_id}: {escape_text(plan.goal)}\n")
    spec = plan.spec
    w(
        f"  language {spec.language} · backend {backend_name(spec.backend)} · "
        f"timeout {spec.timeout_sec} s · "
        f"network {'on' if spec.network else 'off'}\n"
    )
    w(f"  command  {' '.join(plan.command)}\n")
    for check in plan.checks:
        w(f"  [{'ok' if check['ok'] else '!!'}] {check['label']}\n")
    for warning in plan.warnings:
        w(f"  warning ({warning['severity']}): {warning['label']}: {warning['detail']}\n")
    if plan.blocked:
        w(f"  BLOCKED: {escape_text(str(plan.blocked_reason))}\n")
    w(f"  digest   {plan.digest}\n")


def print_plan_code(
    plan: ExecutionPlan, stream: TextIO = sys.stdout, *, max_lines: int = PREVIEW_LINES
) -> None:
    """The plan's code as an approver must see it: escaped, with every cut stated."""
    preview = code_preview(plan.spec.code, max_lines=max_lines)
    for line in preview.lines:
        stream.write(f"  | {line}\n")
    for note in preview.notes:
        stream.write(f"  ! {note}\n")
    if preview.hidden_lines or preview.cut_lines:
        stream.write("  ! --json prints the whole code\n")


def print_result_footer(result: RunResult, stream: TextIO = sys.stderr) -> None:
    """The one-line footer after a run."""
    stream.write(footer(result) + "\n")


def print_status(status: Status, stream: TextIO = sys.stdout, *, verbose: bool = False) -> None:
    """``jupyter sandbox status`` in text (``verbose``: each isolation layer by its id)."""
    stream.write(status_text(status, verbose=verbose))
