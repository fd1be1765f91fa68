"""The notebook views as one object: what the composition root hands to the kernel magic.

The magic asks for a card, the settings panel or a progress bar through a
protocol of its own (``kernel/views.py``); this class answers with the
ipywidgets ones. Neither face imports the other: :mod:`gitpilot_jupyter.wiring`
puts them together.
"""

from __future__ import annotations

from collections.abc import Callable

from ..client.base import SandboxClient
from ..sandbox.plans import ExecutionPlan
from ..sandbox.results import RunResult
from .approval import ApprovalCard
from .batch import BatchProgressBar
from .panel import SandboxSettingsPanel


class WidgetViews:
    """Approve / Reject cards, the settings panel and batch progress bars as ipywidgets."""

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
