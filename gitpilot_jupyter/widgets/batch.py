"""The progress bar of ``%sandbox batch``: an ipywidgets bar and a one-line count."""

from __future__ import annotations

from typing import Any

import ipywidgets as ipw

from ..sandbox.batch import BatchProgress


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
