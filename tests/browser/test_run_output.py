"""▶ Run's output in a real lab: a 512 KB flood keeps the page responsive, the result has
an elapsed time, Re-run, Copy and Clear, and new agent plans are announced."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from gitpilot_jupyter.agents import AgentSandbox

from .flood import APPROVE, run_flood
from .lab import DEMO_NOTEBOOK, Lab
from .ui import open_file, plan_dialog, run_button

pytestmark = pytest.mark.browser

#: Before frames were batched the page froze 12-20 s on this flood; a frame that waits this
#: long means it froze again (generous: the browser shares 2 loaded cores with the run).
MAX_FRAME_GAP_MS = 3000


def test_a_512_kb_flood_streams_without_freezing_the_page(lab: Lab, page: Page) -> None:
    watch = run_flood(lab, page)
    print(
        f"\n512 KiB flood: run and render {watch['took']:.0f} ms, longest frame gap "
        f"{watch['maxGap']:.0f} ms, {watch['longTasks']} long tasks "
        f"({watch['longTaskMs']:.0f} ms in all), {watch['shown']} characters shown"
    )
    # The run's output cap keeps 512,000 bytes of the 524,288 streamed.
    assert watch["shown"] >= 500_000
    assert watch["maxGap"] < MAX_FRAME_GAP_MS, watch
    # The output stays in its scroll box, which followed it to the end.
    box = page.locator(".jp-gitpilot-output .jp-gitpilot-output-text")
    assert box.evaluate("node => node.clientHeight") < 1000
    assert box.evaluate("node => node.scrollHeight - node.scrollTop - node.clientHeight") < 50


def test_a_run_shows_its_clock_and_offers_rerun_copy_and_clear(lab: Lab, page: Page) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python", nth=1).click()  # prints first, sleeps, prints second
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    output = page.locator(".jp-gitpilot-output")
    # The clock ticks while the snippet sleeps.
    expect(output.locator(".jp-gitpilot-elapsed")).to_have_text(re.compile(r"^[1-9]\d* s$"))
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")
    expect(output.locator(".jp-gitpilot-elapsed")).to_have_count(0)

    output.get_by_role("button", name="Copy the output").click()
    expect(output.get_by_role("button", name="Copy the output")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "first\nsecond\n"

    output.get_by_role("button", name="Clear the output").click()
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")

    output.get_by_role("button", name="Run this again (you approve the plan first)").click()
    dialog = plan_dialog(page)
    expect(dialog.get_by_label("Code to run")).to_contain_text("second")
    dialog.get_by_role("button", name=APPROVE).click()
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("first\nsecond\n")


def test_new_agent_plans_are_announced_with_a_way_to_them(lab: Lab, page: Page) -> None:
    # The status is polled every 30 s by default: a notification is due within one poll.
    agent = AgentSandbox(approval="ask", server=lab.server.url, token=lab.token)
    replies = [agent.run_command(f"echo agent-plan-{n}") for n in (1, 2)]
    ids = [reply.plan_id for reply in replies if reply.plan_id]
    assert len(ids) == 2, [reply.text for reply in replies]
    try:
        toast = page.locator(".Toastify__toast").filter(
            has_text=re.compile(r"new agent plans? waits? for your approval")
        )
        expect(toast.first).to_be_visible(timeout=60_000)
        print(f"\nannounced: {toast.first.inner_text()!r}")
        toast.first.get_by_role("button", name="Open Pending Plans").click()
        panel = page.locator("#gitpilot-sandbox-pending")
        for plan_id in ids:
            expect(panel.locator(f'[data-plan-id="{plan_id}"]')).to_be_visible()
    finally:
        for plan_id in ids:
            lab.api("POST", "api/sandbox/reject", json={"plan_id": plan_id})
