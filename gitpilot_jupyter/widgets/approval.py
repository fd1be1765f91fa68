"""The Approve / Reject card: one card for a cell's risky plan and for someone else's plan.

The card shows the plan (goal, source, language, backend, timeout, network,
checks, warnings, the code). Each card decides once: a second click does nothing.

* A ``%%sandbox`` cell's plan with a high-severity warning (``runs=True``):
  Approve approves the plan and runs it, streaming the output into the card;
  Reject runs nothing.
* A plan listed by ``%sandbox plans`` (``runs=False``), typically an agent's in
  ``ask`` mode: Approve only approves it on the server; the agent that planned it
  claims the token and runs it itself, so the token is neither kept nor shown
  here. Reject drops the plan on the server and the waiting agent learns so.
"""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable, Coroutine
from typing import Any

import ipywidgets as ipw
from traitlets import Enum

from ..client.local import SandboxClient
from ..sandbox import rich
from ..sandbox.display import (
    OUTPUT_BOX_MAX_HEIGHT,
    SCROLLING_PREVIEW_LINE_CHARS,
    SCROLLING_PREVIEW_LINES,
    code_preview,
    escape_text,
)
from ..sandbox.errors import SandboxError
from ..sandbox.plans import ExecutionPlan
from ..sandbox.report import failure_message, footer
from ..sandbox.results import RunResult, new_run_id
from ..sandbox.service.planner import HOME_HIDDEN_CHECKS, network_label
from ..sandbox.sync import run_sync

#: Severity as a bar beside the warning (JupyterLab's theme colours, 3:1 against either
#: background); the warning's text keeps the theme's own colour, AA in light and dark.
_SEVERITY_BARS = {
    "high": "var(--jp-error-color1, #d32f2f)",
    "medium": "var(--jp-warn-color1, #f57c00)",
    "low": "var(--jp-border-color1, #9e9e9e)",
}
#: The text colour of everything on the card: the theme's, which meets AA on its background.
_TEXT = "color:var(--jp-content-font-color1, inherit)"
#: How escapes and cut markers stand out from the code around them (their own background,
#: so the pair keeps its contrast in either theme).
_MARK_STYLE = "color:#b71c1c;background:#ffebee;border-radius:2px"
#: The card's border for each state: it says the outcome once there is one.
BORDERS = {
    "pending": "2px solid var(--jp-brand-color1, #1976d2)",
    "risky": "2px solid var(--jp-error-color1, #d32f2f)",
    "running": "2px dashed var(--jp-brand-color1, #1976d2)",
    "done": "2px solid var(--jp-success-color1, #388e3c)",
    "approved": "2px solid var(--jp-success-color1, #388e3c)",
    "rejected": "2px solid var(--jp-border-color1, #9e9e9e)",
    "failed": "2px solid var(--jp-error-color1, #d32f2f)",
}
#: The tick box a high-risk plan needs before Approve works (the lab dialog's words).
CONSENT_LABEL = "I have read the high-severity warning and want to run this anyway"
#: Approve's name while the tick box is empty (the lab dialog's words).
CONSENT_FIRST = "Tick the box above first: this plan has a high-severity warning"


def code_html(code: str) -> str:
    """The code as an approver must see it: escapes marked, cuts and digest-relevant notes said."""
    preview = code_preview(
        code, max_lines=SCROLLING_PREVIEW_LINES, max_line_chars=SCROLLING_PREVIEW_LINE_CHARS
    )
    lines = [
        "".join(
            f"<span class='gitpilot-escape' style='{_MARK_STYLE}'>{html.escape(piece)}</span>"
            if marked
            else html.escape(piece)
            for piece, marked in line
        )
        for line in preview.segments
    ]
    block = (
        "<pre style='max-height:12em;overflow:auto;white-space:pre-wrap;"
        f"overflow-wrap:anywhere'>{chr(10).join(lines)}</pre>"
    )
    notes = "".join(
        f"<div class='gitpilot-note' style='{_TEXT}'>⚠ {html.escape(note)}</div>"
        for note in preview.notes
    )
    return block + notes


def plan_html(plan: ExecutionPlan) -> str:
    """The plan as a compact HTML block (everything user-supplied is escaped)."""

    def e(text: str) -> str:
        return html.escape(escape_text(text))

    spec = plan.spec
    rows = [
        f"<b>{e(plan.goal)}</b> <code>{e(plan.plan_id)}</code>",
        (
            f"source <b>{e(plan.source)}</b> · "
            f"language <b>{e(spec.language)}</b> · backend <b>{e(spec.backend)}</b> · "
            f"timeout <b>{spec.timeout_sec} s</b> · "
            f"network <b>{'on' if spec.network else 'off'}</b>"
        ),
    ]
    # A failed check is bold as well as crossed: neither relies on colour alone.
    rows.append(
        " · ".join(
            f"<span>✓ {e(str(c['label']))}</span>"
            if c["ok"]
            else f"<span><b>✗ {e(str(c['label']))}</b></span>"
            for c in plan.checks
        )
    )
    kept = kept_from_snippet(plan)
    if kept:
        rows.append(f"What this snippet cannot reach on this host: {e(kept)}.")
    for w in plan.warnings:
        bar = _SEVERITY_BARS.get(w["severity"], _SEVERITY_BARS["low"])
        rows.append(
            f"<div style='border-left:4px solid {bar};padding-left:4px'>⚠ "
            f"<b>{e(w['severity'])}</b>: {e(w['label'])}: {e(w['detail'])}</div>"
        )
    rows.append(code_html(spec.code))
    rows.append(f"digest <code>{e(plan.digest)}</code>")
    return f"<div style='{_TEXT}'>" + "".join(f"<div>{row}</div>" for row in rows) + "</div>"


def kept_from_snippet(plan: ExecutionPlan) -> str:
    """What the plan's own checks say the run cannot reach, in plain words ("" when none).

    Only what the engine verified and wrote into the plan: a network-off check that
    passed (the engine cut the network off), a home check that passed (its wall hides
    the home folder, ``~/.ssh`` and the server's secret files); never a claim of this
    card's own.
    """
    spec = plan.spec
    kept: list[str] = []
    network_off = network_label(spec.backend, False)
    if not spec.network and any(c["ok"] and c["label"] == network_off for c in plan.checks):
        kept.append("the network (no connections in or out)")
    kept += [
        HOME_HIDDEN_CHECKS[c["label"]]
        for c in plan.checks
        if c["ok"] and c["label"] in HOME_HIDDEN_CHECKS
    ]
    return "; ".join(kept)


class ApprovalCard(ipw.VBox):  # type: ignore[misc]
    """Approve / Reject a plan.

    With ``runs=True`` the run happens on the click and shows in :attr:`output`;
    with ``runs=False`` Approve only approves (``state`` ``approved``) and the
    plan's planner runs it.
    """

    state = Enum(
        ("pending", "running", "done", "approved", "rejected", "failed"),
        default_value="pending",
        help="Where the card is: waiting for a decision, running, or decided.",
    )

    def __init__(
        self,
        plan: ExecutionPlan,
        client: SandboxClient,
        *,
        on_result: Callable[[RunResult], None] | None = None,
        runs: bool = True,
    ) -> None:
        self.plan = plan
        self.client = client
        self.on_result = on_result
        self.runs = runs
        self.result: RunResult | None = None
        #: A high-risk plan's deliberate step: Approve works only once this is ticked.
        self.consent: ipw.Checkbox | None = None
        if plan.high_risk and not plan.blocked:
            self.consent = ipw.Checkbox(
                value=False,
                description=CONSENT_LABEL,
                indent=False,
                layout=ipw.Layout(width="auto"),
            )
            self.consent.observe(lambda _: self._sync_approve(), names="value")
        self.approve_button = ipw.Button(
            description="Run anyway"
            if self.consent and runs
            else "Approve and run"
            if runs
            else "Approve",
            # Not "warning": its orange under white text is 2.9:1 in the light theme.
            button_style="danger",
            icon="play" if runs else "check",
        )
        self.reject_button = ipw.Button(
            description="Reject",
            icon="times",
            tooltip="Reject this plan: nothing runs"
            if runs
            else f"Reject this plan: the {plan.source} that asked is told it will not run",
        )
        self._sync_approve()
        self.status = ipw.HTML(
            "<i>This snippet needs your approval before it runs.</i>"
            if runs
            else f"<i>Requested by {html.escape(plan.source)}: Approve lets it run this plan "
            "itself; nothing runs here.</i>"
        )
        # The run's output scrolls in a box of its own: a flood never makes the card tall.
        self.output = ipw.Output(
            layout=ipw.Layout(max_height=OUTPUT_BOX_MAX_HEIGHT, overflow="auto")
        )
        self.approve_button.on_click(lambda _: self.approve())
        self.reject_button.on_click(lambda _: self.reject())
        controls = [ipw.HBox([self.approve_button, self.reject_button])]
        if self.consent is not None:
            controls.insert(0, self.consent)
        super().__init__(
            [ipw.HTML(plan_html(plan)), *controls, self.status, self.output],
            layout=ipw.Layout(border=self._border(), padding="6px", margin="4px 0"),
        )
        self.observe(lambda _: setattr(self.layout, "border", self._border()), names="state")

    def _border(self) -> str:
        if self.state == "pending" and self.consent is not None:
            return BORDERS["risky"]
        return BORDERS[self.state]

    def _sync_approve(self) -> None:
        """Approve works once the tick box (if any) is ticked; its name says which it is."""
        ticked = self.consent is None or bool(self.consent.value)
        pending = self.state == "pending"
        self.approve_button.disabled = not (ticked and pending)
        self.approve_button.tooltip = (
            CONSENT_FIRST
            if not ticked
            else "Approve this plan and run it in the sandbox"
            if self.runs
            else f"Approve this plan: the {self.plan.source} that asked runs it"
        )

    def focus(self) -> None:
        """Give the card the keyboard focus: Reject on a high-risk plan (as the lab dialog's
        Cancel: Enter by habit never approves it), else Approve."""
        (self.reject_button if self.consent is not None else self.approve_button).focus()

    def _decided(self) -> bool:
        if self.state != "pending":
            return True
        self.approve_button.disabled = self.reject_button.disabled = True
        return False

    def approve(self) -> None:
        """Approve the plan and run it (its output streams into :attr:`output`), or only approve.

        Only approving (``runs=False``) drops the server's token: the planner claims it.
        """
        if self.consent is not None and not self.consent.value:
            return  # the tick box first: a click on a disabled button does nothing either
        if self._decided():
            return
        if self.consent is not None:
            self.consent.disabled = True
        if not self.runs:
            self._decide(self._approve_for_planner, "approved", "Approved", "Not approved")
            return
        self.state = "running"
        self.status.value = "<i>Approved: running…</i>"
        run_id = new_run_id()
        try:
            # A kernel interrupt while it runs stops the run where it runs, as in a cell.
            result = run_sync(
                self._approve_and_run(run_id), on_interrupt=lambda: self.client.cancel(run_id)
            )
        except SandboxError as exc:
            self.state = "failed"
            self.status.value = f"<b>Not run:</b> {html.escape(exc.message)}"
            return
        except KeyboardInterrupt:
            self.state = "failed"
            self.status.value = "<b>Stopped:</b> the snippet was killed."
            return
        self.result = result
        self.output.append_stdout(footer(result, self.client.path) + "\n")
        if result.ok:
            self.state = "done"
            self.status.value = "<i>Approved and run.</i>"
        else:
            self.state = "failed"
            self.status.value = f"<b>{html.escape(failure_message(result))}</b>"
        if self.on_result is not None:
            with self.output:  # what the callback prints or displays goes into the card
                self.on_result(result)

    async def _approve_and_run(self, run_id: str) -> RunResult:
        approval = await self.client.approve(self.plan.plan_id, approved_by="user")
        return await self.client.run(
            str(approval["approval_token"]), on_output=self._append, run_id=run_id
        )

    async def _approve_for_planner(self, plan_id: str) -> None:
        # The token in the answer is dropped on purpose: the planner claims it.
        await self.client.approve(plan_id, for_planner=True)

    async def _append(self, stream: str, text: str) -> None:
        if stream == rich.DISPLAY_STREAM:
            # A figure or a table: an output of the card's output area, cleaned as a cell's.
            safe = rich.for_trusted_view(rich.parse_display(text))
            metadata = safe.get("metadata") or {}
            self.output.outputs += (
                {"output_type": "display_data", "data": safe["data"], "metadata": metadata},
            )
        elif stream == "stdout":
            self.output.append_stdout(text)
        else:
            self.output.append_stderr(text)

    def reject(self) -> None:
        """Reject the plan: nothing runs, and the plan is dropped where it waits (the server)."""
        if self._decided():
            return
        if self.consent is not None:
            self.consent.disabled = True
        if not self.runs:
            self._decide(self.client.reject, "rejected", "Rejected", "Not rejected")
            return
        # The cell's own plan: rejected here and in the service, so no other view of the
        # plans (Pending Plans, %sandbox plans, the CLI) keeps offering it.
        with contextlib.suppress(SandboxError):  # already gone (expired): rejected all the same
            run_sync(self.client.reject(self.plan.plan_id))
        self.state = "rejected"
        self.status.value = "<b>Rejected:</b> nothing ran."

    def _decide(
        self,
        action: Callable[[str], Coroutine[Any, Any, None]],
        state: str,
        done: str,
        not_done: str,
    ) -> None:
        """Approve or reject a listed plan on the server; say what happened in :attr:`status`."""
        try:
            run_sync(action(self.plan.plan_id))
        except SandboxError as exc:
            # E.g. the agent's plan expired or was decided elsewhere: say so, keep the card decided.
            self.state = "failed"
            self.status.value = f"<b>{not_done}:</b> {html.escape(exc.message)}"
            return
        self.state = state
        self.status.value = (
            f"<b>{done}:</b> the {html.escape(self.plan.source)} that asked runs it "
            "(its approval token goes to it, not here)."
            if state == "approved"
            else f"<b>{done}:</b> it will not run; whoever asked is told so."
        )
