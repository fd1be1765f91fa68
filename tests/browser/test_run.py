"""▶ Run on Markdown code blocks and Run in Sandbox on files, against a real lab server."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from .lab import DEMO_MARKDOWN, DEMO_NOTEBOOK, DEMO_SCRIPT, Lab
from .ui import open_file, plan_dialog, run_button, screenshot, set_theme

pytestmark = pytest.mark.browser

APPROVE = "Approve this plan and run it in the sandbox"


def pending_codes(lab: Lab) -> list[str]:
    """The code of every plan waiting for approval on the server."""
    return [plan["code"] for plan in lab.api("GET", "api/sandbox/plans").json()["plans"]]


def test_run_code_block_plans_approves_and_shows_output(lab: Lab, page: Page) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python").click()

    dialog = plan_dialog(page)
    expect(dialog).to_contain_text("Run in the sandbox?")
    expect(dialog.locator(".jp-gitpilot-plan-facts")).to_contain_text("python")
    expect(dialog.locator(".jp-gitpilot-plan-facts")).to_contain_text("Local")
    expect(dialog.locator(".jp-gitpilot-plan-facts")).to_contain_text("120 s")
    expect(dialog.get_by_label("Code to run")).to_have_text("print(2+2)")
    screenshot(page, "plan-dialog-light")
    dialog.get_by_role("button", name=APPROVE).click()

    output = page.locator(".jp-gitpilot-output").first
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("4\n")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")
    # The duration, in ms or (on a loaded machine) in seconds.
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text(
        re.compile(r"\d+ ms|\d+\.\d s")
    )
    assert "print(2+2)" not in pending_codes(lab)  # the approval consumed the plan
    cell = page.locator(".jp-MarkdownCell").first
    screenshot(cell, "run-result-light")
    set_theme(page, "JupyterLab Dark")
    screenshot(cell, "run-result-dark")
    set_theme(page, "JupyterLab Light")


def test_output_streams_while_the_snippet_runs(lab: Lab, page: Page) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python", nth=1).click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    output = page.locator(".jp-gitpilot-output")
    # "first" shows while the snippet still sleeps: the run is streamed, not buffered.
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("first\n")
    expect(output.locator(".jp-gitpilot-output-state")).to_contain_text("Running…")
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("first\nsecond\n")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")


def test_timeout_shows_its_badge_and_keeps_the_output(lab: Lab, page: Page) -> None:
    assert lab.api("PUT", "api/sandbox/config", json={"timeout_sec": 2}).status_code == 200
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python", nth=1).click()
    dialog = plan_dialog(page)
    expect(dialog.locator(".jp-gitpilot-plan-facts")).to_contain_text("2 s")
    dialog.get_by_role("button", name=APPROVE).click()
    output = page.locator(".jp-gitpilot-output")
    footer = output.locator(".jp-gitpilot-result-summary")
    expect(footer).to_contain_text("timed out")
    expect(footer).to_contain_text("exit -1")
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("first\n")


def test_cancel_runs_nothing(lab: Lab, page: Page) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "bash").click()
    dialog = plan_dialog(page)
    expect(dialog.get_by_label("Code to run")).to_have_text("echo cancelled-run")
    dialog.get_by_role("button", name="Cancel").click()

    expect(dialog).to_be_hidden()
    expect(page.locator(".jp-gitpilot-output")).to_have_count(0)
    # The declined plan was dropped: nobody can approve it later either.
    page.wait_for_timeout(500)
    assert "echo cancelled-run" not in pending_codes(lab)


def test_blocked_snippet_cannot_be_approved(lab: Lab, page: Page) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    # The keyboard path: Tab reaches the block's ▶ Run button, Enter presses it.
    run_button(page, "bash", nth=1).focus()
    page.keyboard.press("Enter")
    dialog = plan_dialog(page)
    expect(dialog).to_contain_text("cannot be approved")
    expect(dialog.get_by_role("alert")).to_contain_text("rm -rf /")
    approve = dialog.get_by_role("button", name=APPROVE)
    expect(approve).to_be_disabled()
    screenshot(page, "plan-blocked-light")

    page.keyboard.press("Enter")  # the default button of a blocked plan is Cancel
    expect(dialog).to_be_hidden()
    expect(page.locator(".jp-gitpilot-output")).to_have_count(0)


def test_run_file_from_file_browser(lab: Lab, page: Page) -> None:
    page.locator(".jp-DirListing-item", has_text=DEMO_SCRIPT).click(button="right")
    page.get_by_role("menuitem", name="Run in Sandbox").click()
    dialog = plan_dialog(page)
    expect(dialog.locator(".jp-gitpilot-plan-facts")).to_contain_text(DEMO_SCRIPT)
    dialog.get_by_role("button", name=APPROVE).click()

    tab = page.locator(".jp-gitpilot-run-tab")
    expect(tab.locator(".jp-gitpilot-output-text")).to_contain_text("hello from")
    expect(tab.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")
    expect(page.get_by_role("tab", name=f"▶ {DEMO_SCRIPT}")).to_be_visible()
    screenshot(page, "run-file-light")


def test_markdown_file_code_block_runs(lab: Lab, page: Page) -> None:
    page.locator(".jp-DirListing-item", has_text=DEMO_MARKDOWN).click(button="right")
    page.locator(".lm-Menu-item", has_text="Open With").hover()
    page.locator(".lm-Menu-item", has_text="Markdown Preview").click()
    run_button(page, "javascript").click()
    plan_dialog(page).get_by_role(
        "button", name="Approve this plan and run it in the sandbox"
    ).click()
    output = page.locator(".jp-gitpilot-output")
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("42\n")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")
