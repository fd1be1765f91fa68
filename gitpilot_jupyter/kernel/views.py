"""What the magic shows in a notebook, as a protocol: the kernel never imports the widgets.

The magic needs four views: an Approve / Reject card for a plan, the settings
panel, a batch's progress bar and the card of a batch with high-risk items. It
asks for them through :class:`NotebookViews`, which the composition root
(:mod:`gitpilot_jupyter.wiring`) fills with the ipywidgets ones when
``%load_ext gitpilot_jupyter`` registers the magics.
A magic registered without views says how to load it instead of failing late.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from IPython.core.error import UsageError

from ..client.base import SandboxClient
from ..sandbox.batch import BatchPlan, BatchProgress
from ..sandbox.plans import ExecutionPlan
from ..sandbox.results import RunResult


def focus(view: Any) -> None:
    """Give a shown card the keyboard focus, where the view can take it (after ``display``:
    the front end has the view by the time the request arrives)."""
    take = getattr(view, "focus", None)
    if callable(take):
        take()


class ProgressView(Protocol):
    """A batch's progress, updated as items finish."""

    def update(self, progress: BatchProgress) -> None:
        """Show ``progress``."""

    def stopped(self, why: str) -> None:
        """Mark the batch as stopped (deadline, interrupt)."""


class NotebookViews(Protocol):
    """The views the magic displays; each answer is a displayable object."""

    def approval_card(
        self,
        plan: ExecutionPlan,
        client: SandboxClient,
        *,
        on_result: Callable[[RunResult], None] | None = None,
        runs: bool = True,
    ) -> Any:
        """An Approve / Reject card for ``plan`` (``runs=False``: Approve only approves)."""

    def settings_panel(self, client: SandboxClient) -> Any:
        """The settings panel, loaded from ``client``."""

    def batch_progress(self, total: int) -> ProgressView:
        """A progress bar for a batch of ``total`` items."""

    def batch_approval_card(
        self, batch: BatchPlan, run: Callable[[ProgressView], tuple[str, Any]]
    ) -> Any:
        """An Approve / Reject card for ``batch``; Approve calls ``run(its progress bar)``,
        which runs the batch and answers the report's text and the results table."""


class NoViews:
    """The views of a magic registered without the extension entry: each says how to fix it."""

    @staticmethod
    def _missing() -> UsageError:
        return UsageError(
            "sandbox: the notebook views (cards, panel, progress bar) are not wired in; "
            "load the magics with %load_ext gitpilot_jupyter"
        )

    def approval_card(
        self,
        plan: ExecutionPlan,
        client: SandboxClient,
        *,
        on_result: Callable[[RunResult], None] | None = None,
        runs: bool = True,
    ) -> Any:
        raise self._missing()

    def settings_panel(self, client: SandboxClient) -> Any:
        raise self._missing()

    def batch_progress(self, total: int) -> ProgressView:
        raise self._missing()

    def batch_approval_card(
        self, batch: BatchPlan, run: Callable[[ProgressView], tuple[str, Any]]
    ) -> Any:
        raise self._missing()
