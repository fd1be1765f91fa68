"""The notebook views as one object: what the composition root hands to the kernel magic.

The magic asks for a card, the settings panel or a progress bar through a
protocol of its own (``kernel/views.py``); this class answers with the
ipywidgets ones. Neither face imports the other: :mod:`gitpilot_jupyter.wiring`
puts them together.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..client.base import SandboxClient
from ..sandbox.batch import BatchPlan
from ..sandbox.plans import ExecutionPlan
from ..sandbox.results import RunResult
from .approval import ApprovalCard
from .batch import BatchApprovalCard, BatchProgressBar
from .panel import SandboxSettingsPanel


class WidgetViews:
    """Approve / Reject cards, the settings panel, batch progress bars and cards as ipywidgets."""

    def approval_card(
        self,
        plan: ExecutionPlan,
        client: SandboxClient,
        *,
        on_result: Callable[[RunResult], None] | None = None,
        runs: bool = True,
    ) -> ApprovalCard:
        """An Approve / Reject card for ``plan`` (``runs=False``: Approve only approves)."""
        return ApprovalCard(plan, client, on_result=on_result, runs=runs)

    def settings_panel(self, client: SandboxClient) -> SandboxSettingsPanel:
        """The settings panel, loaded from ``client``."""
        return SandboxSettingsPanel.for_client(client)

    def batch_progress(self, total: int) -> BatchProgressBar:
        """A progress bar for a batch of ``total`` items."""
        return BatchProgressBar(total)

    def batch_approval_card(
        self, batch: BatchPlan, run: Callable[[BatchProgressBar], tuple[str, Any]]
    ) -> BatchApprovalCard:
        """An Approve / Reject card for a batch with high-risk items."""
        return BatchApprovalCard(batch, run)
