"""``%sandbox batch`` in a notebook: the progress bar, and the card of a high-risk batch."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as ipw
from traitlets import Enum

from ..sandbox.batch import BatchPlan, BatchProgress
from ..sandbox.batch.render import SHOWN_IDS, batch_plan_text
from ..sandbox.errors import SandboxError
from .approval import code_html


class BatchProgressBar(ipw.VBox):  # type: ignore[misc]
    """``[#####-----]  120/300 done · 3 failed · 12.3 s``, updated as items finish."""

    def __init__(self, total: int, **kwargs: Any) -> None:
        self.bar = ipw.IntProgress(
            value=0, min=0, max=max(total, 1), description="batch", bar_style="info"
        )
        self.label = ipw.Label(value=f"0/{total} done")
        super().__init__([ipw.HBox([self.bar, self.label])], **kwargs)

    def update(self, progress: BatchProgress) -> None:
        """Show ``progress``; the bar turns green when all went well, orange otherwise."""
        self.bar.value = progress.finished + progress.skipped
        self.label.value = progress.line()
        if progress.remaining == 0:
            bad = progress.failed + progress.timed_out + progress.blocked + progress.error
            self.bar.bar_style = "warning" if bad else "success"

    def stopped(self, why: str) -> None:
        """Mark the batch as stopped (deadline, interrupt) with what is left."""
        self.bar.bar_style = "danger"
        self.label.value += f" · stopped ({why})"


class BatchApprovalCard(ipw.VBox):  # type: ignore[misc]
    """Approve / Reject a batch with high-risk items, as a ``%%sandbox`` cell's card does a plan.

    The card shows the batch's plan and the code of each high-risk item; Approve stays
    disabled until the tick box says those items were looked at. Approving calls ``run``
    with the card's own progress bar: it runs the batch and answers the report's text and
    the results table, both shown in the card (the table also in :attr:`table`).
    """

    state = Enum(
        ("pending", "running", "done", "rejected", "failed"),
        default_value="pending",
        help="Where the card is: waiting for a decision, running, or decided.",
    )

    def __init__(
        self, batch: BatchPlan, run: Callable[[BatchProgressBar], tuple[str, Any]]
    ) -> None:
        self.batch = batch
        self._run = run
        self.table: Any = None
        high, runnable = batch.summary()["high_risk"], batch.summary()["runnable"]
        self.looked = ipw.Checkbox(
            value=False,
            indent=False,
            description=f"I looked at the {len(high)} high-risk item(s) above: run them too",
            layout=ipw.Layout(width="auto"),
        )
        self.approve_button = ipw.Button(
            description=f"Approve and run {runnable} snippet{'' if runnable == 1 else 's'}",
            button_style="danger",
            icon="play",
            disabled=True,
            layout=ipw.Layout(width="auto"),
        )
        self.reject_button = ipw.Button(description="Reject", icon="times")
        self.looked.observe(self._ticked, names="value")
        self.approve_button.on_click(lambda _: self.approve())
        self.reject_button.on_click(lambda _: self.reject())
        self.status = ipw.HTML("<i>This batch needs your approval before anything runs.</i>")
        self.bar = BatchProgressBar(batch.count)
        self.bar.layout.display = "none"  # shown once it runs
        self.output = ipw.Output()
        super().__init__(
            [
                ipw.HTML(batch_html(batch)),
                self.looked,
                ipw.HBox([self.approve_button, self.reject_button]),
                self.status,
                self.bar,
                self.output,
            ],
            layout=ipw.Layout(border="1px solid #b71c1c", padding="6px", margin="4px 0"),
        )

    def _ticked(self, change: dict[str, Any]) -> None:
        if self.state == "pending":
            self.approve_button.disabled = not change["new"]

    def _decided(self) -> bool:
        if self.state != "pending":
            return True
        self.approve_button.disabled = self.reject_button.disabled = self.looked.disabled = True
        return False

    def approve(self) -> None:
        """Run the batch (only once the tick box is ticked); show its report and table."""
        if not self.looked.value or self._decided():
            return
        self.state = "running"
        self.status.value = "<i>Approved: running…</i>"
        self.bar.layout.display = None
        try:
            report, self.table = self._run(self.bar)
        except SandboxError as exc:
            self.state = "failed"
            self.status.value = f"<b>Not run:</b> {html.escape(exc.message)}"
            return
        self.output.append_stdout(report + "\n")
        self.output.append_display_data(self.table)
        self.state = "done"
        self.status.value = (
            "<i>Approved and run. The same line with <code>--yes</code> answers this table as a "
            "value (with <code>--out</code>, nothing runs twice).</i>"
        )

    def reject(self) -> None:
        """Reject the batch: nothing runs."""
        if self._decided():
            return
        self.state = "rejected"
        self.status.value = "<b>Rejected:</b> nothing ran."


def batch_html(batch: BatchPlan) -> str:
    """The batch's plan and the code of its high-risk items (everything escaped)."""
    parts = [f"<pre style='white-space:pre-wrap'>{html.escape(batch_plan_text(batch))}</pre>"]
    for item_id in batch.summary()["high_risk"][:SHOWN_IDS]:
        plan = batch.item(item_id)
        warnings = "; ".join(f"{w['label']}: {w['detail']}" for w in plan.warnings)
        parts.append(f"<div><b>{html.escape(item_id)}</b>: ⚠ {html.escape(warnings)}</div>")
        parts.append(code_html(plan.spec.code))
    return "".join(parts)
