"""Sandbox: Pending Plans: a person approves (or rejects) an agent's ask-mode plan in the lab.

A real agent (``AgentSandbox`` in ``ask`` mode) plans through the suite's lab server; the
panel, opened from the palette, decides it; the agent then claims its token and runs the
plan itself. The browser never runs it and never sees the token on screen. While the
agent's run is under way the panel shows it under "Running now", and ■ Stop ends it on
the server.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from playwright.sync_api import Locator, Page, Request, expect

from gitpilot_jupyter.agents import AgentReply, AgentSandbox
from tests.server.test_cancel import appears, new_marker, processes_with, sleeper

from .lab import Lab
from .ui import run_palette_command, screenshot, set_theme

pytestmark = pytest.mark.browser

#: Generous: the agent's claim and run share 2 CPU cores with the browser and the server.
WAIT_SEC = 60


def ask_mode_agent(lab: Lab) -> AgentSandbox:
    """An agent whose plans wait on the lab's server for a person."""
    return AgentSandbox(approval="ask", server=lab.server.url, token=lab.token)


def pending_ids(lab: Lab) -> list[str]:
    return [plan["plan_id"] for plan in lab.api("GET", "api/sandbox/plans").json()["plans"]]


def open_pending_plans(page: Page, plan_id: str) -> tuple[Locator, Locator]:
    """Palette → Sandbox: Pending Plans; answers the panel and the plan's card."""
    run_palette_command(page, "Sandbox: Pending Plans")
    panel = page.locator("#gitpilot-sandbox-pending")
    card = panel.locator(f'[data-plan-id="{plan_id}"]')
    expect(card).to_be_visible()
    return panel, card


def test_approve_in_the_panel_lets_the_agent_claim_and_run(lab: Lab, page: Page) -> None:
    agent = ask_mode_agent(lab)
    code = "print('the agent ran it after the lab approved')"
    reply = agent.run_in_sandbox("python", code, timeout_sec=45)
    assert reply.status == "approval_pending", reply.text
    plan_id = reply.plan_id or ""
    assert plan_id in pending_ids(lab)

    requests: list[Request] = []
    page.on("request", lambda request: requests.append(request))

    _, card = open_pending_plans(page, plan_id)
    for needle in ("agent", "python", "Local", "45 s", "blocked", code):
        expect(card).to_contain_text(needle)
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: Local · 1 plan waiting")
    screenshot(page, "pending-plans-light")  # the panel and the status bar's count

    # Keyboard: focus Approve and press Enter.
    card.get_by_role("button", name=re.compile("^Approve")).focus()
    with page.expect_response(re.compile(r"/api/sandbox/approve(\?|$)")) as approved:
        page.keyboard.press("Enter")
    expect(card).to_contain_text("Approved — the agent will run it.")
    expect(card.get_by_role("button")).to_have_count(0)
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: Local")
    assert plan_id not in pending_ids(lab)
    set_theme(page, "JupyterLab Dark")
    screenshot(card, "pending-plans-approved-dark")
    set_theme(page, "JupyterLab Light")

    assert approved.value.ok
    token = approved.value.json()["approval_token"]
    assert token not in page.content()  # neither shown nor put anywhere in the page
    assert not [r for r in requests if "/api/sandbox/run" in r.url]  # the lab ran nothing

    done = agent.wait_for_approval(plan_id, WAIT_SEC)
    assert done.status == "completed" and done.ok, done.text
    assert "the agent ran it after the lab approved" in done.text


def test_reject_in_the_panel_ends_the_agents_wait(lab: Lab, page: Page) -> None:
    agent = ask_mode_agent(lab)
    reply = agent.run_command("echo never-run")
    plan_id = reply.plan_id or ""
    assert reply.status == "approval_pending", reply.text

    _, card = open_pending_plans(page, plan_id)
    expect(card).to_contain_text("echo never-run")
    card.get_by_role("button", name=re.compile("^Reject")).click()
    expect(card).to_contain_text("Rejected — it will not run.")
    assert plan_id not in pending_ids(lab)

    answer = agent.wait_for_approval(plan_id, WAIT_SEC)
    assert answer.status == "not_approved" and "Nothing was run" in answer.text


def test_only_plans_waiting_for_someone_else_are_listed_and_counted(lab: Lab, page: Page) -> None:
    # A plan decided where it is made (a ▶ Run dialog's) next to an agent's ask-mode plan.
    own = lab.api(
        "POST",
        "api/sandbox/plan",
        json={"language": "python", "code": "print('decided here')", "source": "code_block"},
    )
    assert own.status_code == 200, own.text
    agent = ask_mode_agent(lab)
    reply = agent.run_in_sandbox("python", "print('waits for a person')", timeout_sec=30)
    plan_id = reply.plan_id or ""
    assert reply.status == "approval_pending", reply.text

    panel, card = open_pending_plans(page, plan_id)
    cards = panel.locator(".jp-gitpilot-pending-card")
    expect(cards).to_have_count(1)  # the dialog's plan is not someone else's to decide
    status = page.locator(".jp-gitpilot-status")
    expect(status).to_have_text("Sandbox: Local · 1 plan waiting")  # the bar and the panel agree

    card.get_by_role("button", name=re.compile("^Reject")).click()
    expect(card).to_contain_text("Rejected — it will not run.")
    expect(status).to_have_text("Sandbox: Local")
    expect(cards).to_have_count(0, timeout=15_000)  # a rejected plan leaves by itself
    expect(panel).to_contain_text("No plans are waiting for your decision.")


def test_stop_in_the_panel_ends_the_run_the_agent_started(lab: Lab, page: Page) -> None:
    marker = new_marker()
    agent = ask_mode_agent(lab)
    reply = agent.run_in_sandbox("python", sleeper(marker), timeout_sec=120)
    assert reply.status == "approval_pending", reply.text
    plan_id = reply.plan_id or ""

    panel, card = open_pending_plans(page, plan_id)
    card.get_by_role("checkbox").check()  # it starts a process: a high-severity warning
    card.get_by_role("button", name=re.compile("^Approve")).click()
    expect(card).to_contain_text("Approved — the agent will run it.")

    # The agent claims its token and runs the plan itself, as an agent does (its own thread).
    answers: list[AgentReply] = []
    agent_thread = threading.Thread(
        target=lambda: answers.append(agent.wait_for_approval(plan_id, WAIT_SEC)), daemon=True
    )
    agent_thread.start()
    assert appears(marker, within=WAIT_SEC), "the agent's run never started"

    running = panel.locator(f'.jp-gitpilot-running-card[data-plan-id="{plan_id}"]')
    expect(running).to_be_visible(timeout=15_000)  # the panel polls every few seconds
    expect(running).to_contain_text(re.compile(r"Running for .+ — approved by a person\."))
    expect(panel.locator(".jp-gitpilot-pending-card")).to_have_count(0, timeout=15_000)
    expect(panel).to_contain_text("No plans are waiting for your decision.")
    # Running is not waiting for anyone's decision: the status bar counts nothing.
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: Local")
    screenshot(panel, "pending-plans-running-light")

    stop = running.get_by_role("button", name=re.compile("^Stop"))
    with page.expect_response(re.compile(r"/api/sandbox/runs/run_[0-9a-f]{16}(\?|$)")) as stopped:
        stop.click()
    assert stopped.value.ok and stopped.value.json()["cancelled"] is True
    expect(running).to_have_count(0, timeout=15_000)  # it leaves once the run has ended

    agent_thread.join(WAIT_SEC)
    assert answers, "the agent never got an answer to its run"
    done = answers[0]
    assert done.result is not None, done.text
    assert done.result.cancelled is True and done.result.exit_code == -1
    assert "stopped before it ended" in done.text and "never printed" not in done.text
    deadline = time.monotonic() + 10
    while processes_with(marker):  # killed on the server, not only forgotten by the panel
        assert time.monotonic() < deadline, "the snippet's process outlived Stop"
        time.sleep(0.1)
