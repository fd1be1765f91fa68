"""The Approve / Reject card: Approve runs, Reject does not, a second click does nothing."""

from __future__ import annotations

import pytest

from gitpilot_jupyter.client.local import LocalClient
from gitpilot_jupyter.sandbox.errors import PlanNotFound
from gitpilot_jupyter.sandbox.plans import ExecutionPlan
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.sync import run_sync
from gitpilot_jupyter.widgets.approval import ApprovalCard
from tests.support.cards import approve

RISKY = (
    "import subprocess\n"
    "out = subprocess.run(['echo', 'from-child'], capture_output=True, text=True).stdout\n"
    "print(out, end='')\n"
)


def make_plan(client: LocalClient, code: str = RISKY, **kw: object) -> ExecutionPlan:
    plan = run_sync(client.plan(RunOptions(language="python", code=code, **kw)))  # type: ignore[arg-type]
    assert plan.high_risk
    return plan


def texts(card: ApprovalCard, name: str = "stdout") -> str:
    return "".join(o.get("text", "") for o in card.output.outputs if o.get("name") == name)


def test_the_card_shows_the_plan(client: LocalClient) -> None:
    plan = make_plan(client, timeout_sec=42)
    card = ApprovalCard(plan, client)
    shown = card.children[0].value
    for needle in (
        "python",
        "subprocess",
        "42 s",
        "network <b>off</b>",
        "high",
        "starts other programs",
    ):
        assert needle in shown
    assert card.state == "pending"
    # A high-risk plan: Reject works at once, Approve only after the tick box.
    assert card.approve_button.disabled and not card.reject_button.disabled


def test_code_is_escaped_in_the_card(client: LocalClient) -> None:
    plan = make_plan(client, code="import subprocess\n# <script>alert(1)</script>\n")
    shown = ApprovalCard(plan, client).children[0].value
    assert "<script>" not in shown
    assert "&lt;script&gt;" in shown


def test_approve_runs_and_shows_output_in_the_card(client: LocalClient) -> None:
    seen: list[RunResult] = []
    card = ApprovalCard(make_plan(client), client, on_result=seen.append)
    approve(card)
    assert card.state == "done"
    assert texts(card).startswith("from-child\n")
    assert "[sandbox] subprocess · exit 0" in texts(card)
    assert card.approve_button.disabled and card.reject_button.disabled
    assert len(seen) == 1 and seen[0].stdout == "from-child\n"
    first = card.result
    card.approve_button.click()  # a second click does nothing
    card.reject_button.click()
    assert card.result is first and len(seen) == 1 and card.state == "done"


def test_reject_runs_nothing(client: LocalClient) -> None:
    seen: list[RunResult] = []
    plan = make_plan(client)
    card = ApprovalCard(plan, client, on_result=seen.append)
    card.reject_button.click()
    assert card.state == "rejected"
    assert "nothing ran" in card.status.value
    approve(card)
    assert card.state == "rejected" and card.result is None and not seen
    assert card.output.outputs == ()
    # Rejected in the service too: no other view (Pending Plans, the CLI) offers it again.
    assert plan.plan_id not in [p.plan_id for p in client.service.plans.pending()]


def test_a_failing_snippet_marks_the_card_failed(client: LocalClient) -> None:
    card = ApprovalCard(make_plan(client, code="import subprocess\nraise SystemExit(7)\n"), client)
    approve(card)
    assert card.state == "failed"
    assert "exited with code 7" in card.status.value
    assert card.result is not None and card.result.exit_code == 7


def test_stdin_reaches_the_approved_run(client: LocalClient) -> None:
    code = "import subprocess\nprint(input().upper())\n"
    card = ApprovalCard(make_plan(client, code=code, stdin="quiet\n"), client)
    approve(card)
    assert texts(card).startswith("QUIET\n")


def test_an_approval_that_can_no_longer_happen_says_why(client: LocalClient) -> None:
    plan = make_plan(client)
    run_sync(client.approve(plan.plan_id))  # approved elsewhere: the plan is consumed
    card = ApprovalCard(plan, client)
    approve(card)
    assert card.state == "failed"
    assert "Not run" in card.status.value
    with pytest.raises(PlanNotFound):
        client.service.plans.get(plan.plan_id)


def test_approve_only_approves_and_keeps_no_token(client: LocalClient) -> None:
    plan = make_plan(client)
    card = ApprovalCard(plan, client, runs=False)
    assert card.approve_button.description == "Approve"
    assert "nothing runs here" in card.status.value
    approve(card)
    assert card.state == "approved" and card.result is None and card.output.outputs == ()
    approval = client.service.plans.approval_for(plan.plan_id)
    assert approval is not None  # approved, unspent: for its planner to claim
    assert approval.token not in card.status.value
    assert approval.token not in repr(vars(card))
    card.reject_button.click()  # a second click does nothing
    assert card.state == "approved"
    assert client.service.plans.approval_for(plan.plan_id) is approval


def test_reject_only_drops_the_plan_in_the_service(client: LocalClient) -> None:
    plan = make_plan(client)
    card = ApprovalCard(plan, client, runs=False)
    card.reject_button.click()
    assert card.state == "rejected"
    with pytest.raises(PlanNotFound):
        client.service.plans.get(plan.plan_id)
    approve(card)
    assert card.state == "rejected" and client.service.plans.approval_for(plan.plan_id) is None


def test_approve_only_of_a_gone_plan_says_why(client: LocalClient) -> None:
    plan = make_plan(client)
    client.service.plans.reject(plan.plan_id)
    card = ApprovalCard(plan, client, runs=False)
    approve(card)
    assert card.state == "failed" and "Not approved" in card.status.value


def test_an_approved_runs_html_output_shows_in_the_card_in_order(client: LocalClient) -> None:
    code = (
        "import subprocess\nprint('first')\n"
        "from IPython.display import HTML\n"
        "display(HTML('<b>bold</b><script>alert(1)</script>'))\nprint('last')\n"
    )
    card = ApprovalCard(make_plan(client, code=code), client)
    approve(card)
    assert card.state == "done"
    kinds = [o.get("name") or o["output_type"] for o in card.output.outputs]
    assert kinds[:3] == ["stdout", "display_data", "stdout"], kinds
    shown = card.output.outputs[1]["data"]["text/html"]
    # The card is trusted as the cell is: the HTML was cleaned before it was shown.
    assert "<b>bold</b>" in shown and "script" not in shown and "alert" not in shown
