"""What a person sees and can do on the notebook approval card: the lab dialog's rule.

A high-risk plan needs the tick box before Approve works; every button names its
action; the card takes the keyboard focus; its border says the outcome; it says
what the snippet cannot reach; its text keeps the theme's colours.
"""

from __future__ import annotations

import html
import re
from typing import Any

import ipywidgets as ipw
import pytest

from gitpilot_jupyter.client.local import LocalClient
from gitpilot_jupyter.sandbox.display import OUTPUT_BOX_MAX_HEIGHT
from gitpilot_jupyter.sandbox.local.off import OFF_HOME_CHECK
from gitpilot_jupyter.sandbox.plans import ExecutionPlan
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service.planner import HOME_HIDDEN_CHECKS
from gitpilot_jupyter.sandbox.sync import run_sync
from gitpilot_jupyter.widgets.approval import (
    BORDERS,
    CONSENT_FIRST,
    CONSENT_LABEL,
    ApprovalCard,
    kept_from_snippet,
    plan_html,
)

RISKY = "import subprocess\nprint('ran')\n"
PLAIN = "print('ran')\n"


def plan_for(client: LocalClient, code: str, **kw: Any) -> ExecutionPlan:
    return run_sync(client.plan(RunOptions(language="python", code=code, **kw)))


def printed(card: ApprovalCard) -> str:
    return "".join(o.get("text", "") for o in card.output.outputs if o.get("name") == "stdout")


def test_a_high_risk_plan_runs_only_after_the_tick_box(client: LocalClient) -> None:
    card = ApprovalCard(plan_for(client, RISKY), client)
    assert card.consent is not None and card.consent.description == CONSENT_LABEL
    assert card.consent in card.children  # shown, above the buttons
    assert card.approve_button.disabled
    assert card.approve_button.tooltip == CONSENT_FIRST
    card.approve_button.click()  # one click does not approve
    assert card.state == "pending" and printed(card) == ""
    card.consent.value = True
    assert not card.approve_button.disabled
    assert card.approve_button.tooltip == "Approve this plan and run it in the sandbox"
    card.approve_button.click()
    assert card.state == "done" and printed(card).startswith("ran\n")
    assert card.consent.disabled  # decided: the box no longer changes anything


def test_a_plan_without_high_warnings_has_no_tick_box(client: LocalClient) -> None:
    plan = plan_for(client, PLAIN)
    assert not plan.high_risk
    card = ApprovalCard(plan, client, runs=False)
    assert card.consent is None and not card.approve_button.disabled


@pytest.mark.parametrize("runs", [True, False])
def test_every_button_names_its_action(client: LocalClient, runs: bool) -> None:
    card = ApprovalCard(plan_for(client, RISKY), client, runs=runs)
    card.consent.value = True  # type: ignore[union-attr]
    for button in (card.approve_button, card.reject_button):
        assert button.description and button.tooltip
        assert button.tooltip.startswith(("Approve this plan", "Reject this plan"))
    assert "nothing runs" in card.reject_button.tooltip or "will not run" in (
        card.reject_button.tooltip
    )


@pytest.fixture
def focus_requests(monkeypatch: pytest.MonkeyPatch) -> list[ipw.Widget]:
    """The widgets asked to take the focus (the front end's ``{"do": "focus"}`` message)."""
    asked: list[ipw.Widget] = []
    send = ipw.Widget.send

    def record(self: ipw.Widget, content: Any, buffers: Any = None) -> None:
        if content == {"do": "focus"}:
            asked.append(self)
        send(self, content, buffers)

    monkeypatch.setattr(ipw.Widget, "send", record)
    return asked


def test_the_card_focuses_reject_on_a_risky_plan_and_approve_otherwise(
    client: LocalClient, focus_requests: list[ipw.Widget]
) -> None:
    risky = ApprovalCard(plan_for(client, RISKY), client)
    risky.focus()
    plain = ApprovalCard(plan_for(client, PLAIN), client, runs=False)
    plain.focus()
    assert focus_requests == [risky.reject_button, plain.approve_button]


def test_the_border_says_the_outcome(client: LocalClient) -> None:
    done = ApprovalCard(plan_for(client, RISKY), client)
    assert done.layout.border_left == BORDERS["risky"]
    done.consent.value = True  # type: ignore[union-attr]
    done.approve_button.click()
    assert done.layout.border_left == BORDERS["done"] != BORDERS["risky"]
    rejected = ApprovalCard(plan_for(client, RISKY), client)
    rejected.reject_button.click()
    assert rejected.layout.border_left == BORDERS["rejected"] != BORDERS["risky"]
    failed = ApprovalCard(plan_for(client, "import subprocess\nraise SystemExit(3)\n"), client)
    failed.consent.value = True  # type: ignore[union-attr]
    failed.approve_button.click()
    assert failed.state == "failed" and failed.layout.border_left == BORDERS["failed"]


def test_the_card_says_what_the_snippet_cannot_reach(client: LocalClient) -> None:
    cut_off = plan_for(client, RISKY)
    verified = any(c["ok"] and c["label"] == "network disabled" for c in cut_off.checks)
    shown = plan_html(cut_off)
    line = "What this snippet cannot reach on this host: the network"
    # Said exactly when the engine verified it (the plan's own network check passed).
    assert (line in shown) is verified
    assert line not in plan_html(plan_for(client, RISKY, allow_network=True))
    # The home folder, ~/.ssh and the server's secret files: exactly when the home check passed.
    hidden = [
        HOME_HIDDEN_CHECKS[c["label"]]
        for c in cut_off.checks
        if c["ok"] and c["label"] in HOME_HIDDEN_CHECKS
    ]
    assert len(hidden) <= 1
    assert ("~/.ssh and the server&#x27;s secret files." in shown) is bool(hidden)
    assert kept_from_snippet(cut_off) == "; ".join(
        ["the network (no connections in or out)"] * verified + hidden
    )


@pytest.mark.usefixtures("allow_off")
def test_a_pass_through_card_claims_nothing_out_of_reach(client: LocalClient) -> None:
    plan = plan_for(client, PLAIN, backend="off")
    shown = plan_html(plan)
    assert "cannot reach" not in shown and kept_from_snippet(plan) == ""
    assert f"✗ {html.escape(OFF_HOME_CHECK)}" in shown  # said as a failed check, in bold


def test_the_card_text_keeps_the_theme_colours(client: LocalClient) -> None:
    shown = plan_html(plan_for(client, RISKY))
    # No fixed text colour but the escape marks (which bring their own background).
    without_marks = re.sub(r"<span class='gitpilot-escape'[^>]*>", "", shown)
    assert re.findall(r"(?<![-\w])color:\s*#", without_marks) == []
    assert "var(--jp-content-font-color1" in shown


def test_a_flood_in_the_card_scrolls_in_a_bounded_box(client: LocalClient) -> None:
    card = ApprovalCard(plan_for(client, "import subprocess\nprint('x\\n' * 20000)\n"), client)
    card.consent.value = True  # type: ignore[union-attr]
    card.approve_button.click()
    assert card.state == "done" and printed(card).count("x\n") == 20000
    assert card.output.layout.max_height == OUTPUT_BOX_MAX_HEIGHT
    assert card.output.layout.overflow == "auto"
