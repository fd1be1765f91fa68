"""``%sandbox plans | approve | reject``: a person approves an agent's plan from a notebook.

A real ``jupyter server`` with the extension; a real agent (``AgentSandbox`` in
``ask`` mode) plans through it; a real ``InteractiveShell`` whose magic uses
that server lists the plan and decides it with the card's buttons.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

from gitpilot_jupyter.agents import AgentSandbox
from gitpilot_jupyter.client import rest
from gitpilot_jupyter.kernel.display import SandboxUnavailable
from gitpilot_jupyter.kernel.magics import NO_SERVER_NOTE, SandboxMagics
from gitpilot_jupyter.widgets.approval import ApprovalCard
from tests.support.cards import approve
from tests.support.live_server import LiveServer

#: Generous: the agent's claim and run share 2 CPU cores with other suites.
WAIT_SEC = 60


@pytest.fixture
def agent(server: LiveServer) -> AgentSandbox:
    """An agent in ``ask`` mode whose plans wait on ``server``."""
    return AgentSandbox(approval="ask", server=server.url, token=server.token)


@pytest.fixture
def on_server(shell: InteractiveShell, server: LiveServer) -> Iterator[InteractiveShell]:
    """The shell's magic talks to ``server`` over REST."""
    shell.run_line_magic("config", f"SandboxMagics.server = {server.url!r}")
    shell.run_line_magic("config", f"SandboxMagics.server_token = {server.token!r}")
    yield shell


def pending_ids(server: LiveServer) -> list[str]:
    with server.client() as http:
        return [plan["plan_id"] for plan in http.get("/api/sandbox/plans").json()["plans"]]


def card_for(shell: InteractiveShell, magics: SandboxMagics, plan_id: str) -> ApprovalCard:
    """Run ``%sandbox plans`` and return the card it showed for ``plan_id``."""
    with capture_output() as cap:
        shell.run_line_magic("sandbox", "plans")
    assert NO_SERVER_NOTE not in cap.stdout  # the REST path: no caveat
    cards = {card.plan.plan_id: card for card in magics.plan_cards}
    assert plan_id in cards, (plan_id, list(cards), cap.stdout)
    card: ApprovalCard = cards[plan_id]
    return card


def widget_text(card: ApprovalCard) -> str:
    """Everything the card shows or keeps, as one string."""
    parts: list[Any] = [card.status.value, card.children[0].value, card.output.outputs]
    parts += [value for value in vars(card).values() if isinstance(value, (str, dict))]
    return repr(parts)


def test_approve_on_the_card_lets_the_agent_claim_and_run(
    on_server: InteractiveShell,
    magics: SandboxMagics,
    server: LiveServer,
    agent: AgentSandbox,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code = "print('the agent ran it after the notebook approved')"
    reply = agent.run_in_sandbox("python", code, timeout_sec=45)
    assert reply.status == "approval_pending"
    plan_id = reply.plan_id or ""

    card = card_for(on_server, magics, plan_id)
    shown = card.children[0].value
    for needle in (card.plan.goal, "source <b>agent</b>", "language <b>python</b>", "45 s"):
        assert needle in shown
    assert "network <b>off</b>" in shown and "backend <b>subprocess</b>" in shown
    assert "the agent ran it" in shown  # the code itself
    assert card.approve_button.description == "Approve"

    answers: list[Any] = []
    real_call = rest.call_api

    async def spy(*args: Any, **kw: Any) -> Any:
        answers.append(await real_call(*args, **kw))
        return answers[-1]

    monkeypatch.setattr(rest, "call_api", spy)
    approve(card)
    assert card.state == "approved", card.status.value
    assert "runs it" in card.status.value
    assert plan_id not in pending_ids(server)
    assert card.result is None and card.output.outputs == ()  # nothing ran here
    token = answers[-1]["approval_token"]  # what the server answered the approver...
    assert token not in widget_text(card)  # ...is neither shown nor kept

    done = agent.wait_for_approval(plan_id, WAIT_SEC)
    assert done.status == "completed" and done.ok, done.text
    assert "the agent ran it after the notebook approved" in done.text

    calls = len(answers)
    card.approve_button.click()  # a second click does nothing
    card.reject_button.click()
    assert card.state == "approved" and len(answers) == calls


def test_reject_on_the_card_ends_the_agents_wait(
    on_server: InteractiveShell, magics: SandboxMagics, server: LiveServer, agent: AgentSandbox
) -> None:
    reply = agent.run_command("echo never-run")
    plan_id = reply.plan_id or ""
    card = card_for(on_server, magics, plan_id)
    card.reject_button.click()
    assert card.state == "rejected" and "will not run" in card.status.value
    assert plan_id not in pending_ids(server)
    answer = agent.wait_for_approval(plan_id, WAIT_SEC)
    assert answer.status == "not_approved" and "Nothing was run" in answer.text
    card.approve_button.click()  # decided: nothing happens
    assert card.state == "rejected"


def test_a_plan_decided_elsewhere_fails_on_the_card(
    on_server: InteractiveShell, magics: SandboxMagics, server: LiveServer, agent: AgentSandbox
) -> None:
    plan_id = agent.run_command("echo approved-in-the-lab").plan_id or ""
    card = card_for(on_server, magics, plan_id)
    with server.client() as http:
        assert http.post("/api/sandbox/approve", json={"plan_id": plan_id}).is_success
    approve(card)
    assert card.state == "failed" and "Not approved" in card.status.value
    assert agent.wait_for_approval(plan_id, WAIT_SEC).ok


def test_line_forms_approve_and_reject_by_id(
    on_server: InteractiveShell, server: LiveServer, agent: AgentSandbox
) -> None:
    approved = agent.run_command("echo approved-by-line").plan_id or ""
    rejected = agent.run_command("echo rejected-by-line").plan_id or ""
    with capture_output() as cap:
        on_server.run_line_magic("sandbox", f"approve {approved}")
        on_server.run_line_magic("sandbox", f"reject {rejected}")
    assert f"Approved {approved}" in cap.stdout and f"Rejected {rejected}" in cap.stdout
    assert "approval_token" not in cap.stdout
    done = agent.wait_for_approval(approved, WAIT_SEC)
    assert done.ok and "approved-by-line" in done.text
    assert agent.wait_for_approval(rejected, WAIT_SEC).status == "not_approved"
    with pytest.raises(UsageError, match=r"\[plan_not_found\]"):
        on_server.run_line_magic("sandbox", f"approve {approved}")  # decided already
    with pytest.raises(UsageError, match="usage: %sandbox reject PLAN_ID"):
        on_server.run_line_magic("sandbox", "reject")


def test_an_unreachable_server_is_one_line(on_server: InteractiveShell) -> None:
    on_server.run_line_magic("config", "SandboxMagics.server = 'http://127.0.0.1:9'")
    with pytest.raises(SandboxUnavailable, match="Check that the Jupyter server is running"):
        on_server.run_line_magic("sandbox", "plans")
