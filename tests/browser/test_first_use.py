"""The first hour in JupyterLab (issue 17): Stop, Pass-through, risky plans, large output,
one result pane, results that survive reopening, the Settings Editor page, notifications.

Each test walks the journey a user takes and asserts what they see.
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import Locator, Page, expect

from .lab import DEMO_NOTEBOOK, DEMO_SCRIPT, SLOW_SCRIPT, Lab, free_port
from .ui import (
    open_file,
    open_settings_from_menu,
    plan_dialog,
    run_button,
    run_palette_command,
    screenshot,
)

pytestmark = pytest.mark.browser

APPROVE = "Approve this plan and run it in the sandbox"
#: The ▶ Run buttons of the demo notebook's python blocks, by what they do.
LONG, BIG, RISKY = 2, 3, 4


def output_of(page: Page, nth: int) -> Locator:
    """The output area under the nth python block's ▶ Run button."""
    bar = page.locator(".jp-gitpilot-codeblock-bar").filter(
        has=page.get_by_role("button", name="Run python code block in the sandbox")
    )
    return bar.nth(nth).locator("xpath=following-sibling::div[1]").locator(".jp-gitpilot-output")


def notification(page: Page, text: str | re.Pattern[str]) -> Locator:
    """A JupyterLab notification toast showing ``text``."""
    return page.locator(".Toastify__toast").filter(has_text=text).first


def test_stop_ends_a_run_on_the_server_and_says_so_in_one_line(lab: Lab, page: Page) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    button = run_button(page, "python", nth=LONG)
    button.click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()

    output = output_of(page, LONG)
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("started\n")
    # While it runs: progress, a Stop button, and ▶ Run is off (no second run of the block).
    expect(output.locator("progress")).to_be_visible()
    expect(button).to_be_disabled()
    screenshot(page.locator(".jp-MarkdownCell").nth(5), "run-stop-light")
    stopped_at = time.monotonic()
    output.get_by_role("button", name="Stop the run").click()

    summary = output.locator(".jp-gitpilot-result-summary")
    expect(summary).to_have_text(re.compile(r"^stoppedStopped after [\d.]+ m?s\.$"))
    # The snippet sleeps 90 s: the envelope came back at once, so the server ended it.
    assert time.monotonic() - stopped_at < 30
    expect(output.get_by_role("button", name="Stop the run")).to_have_count(0)
    expect(button).to_be_enabled()
    page.wait_for_timeout(1000)
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("started\n")
    screenshot(page.locator(".jp-MarkdownCell").nth(5), "run-stopped-light")


def test_a_file_run_is_stopped_from_its_notification(lab: Lab, page: Page) -> None:
    page.locator(".jp-DirListing-item", has_text=SLOW_SCRIPT).click(button="right")
    page.get_by_role("menuitem", name="Run in Sandbox").click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    pane = page.locator(".jp-gitpilot-run-tab")
    expect(pane.locator(".jp-gitpilot-output-text")).to_have_text("slow started\n")
    running = notification(page, f"Running {SLOW_SCRIPT} in the sandbox…")
    expect(running).to_be_visible()
    page.wait_for_timeout(1000)  # the toast slides in
    screenshot(page, "run-file-progress-light")
    running.get_by_role("button", name="Stop").click()
    expect(notification(page, f"{SLOW_SCRIPT} was stopped.")).to_be_visible(timeout=30_000)
    expect(pane.locator(".jp-gitpilot-result-summary")).to_have_text(
        re.compile(r"^stoppedStopped after [\d.]+ m?s\.$")
    )


def test_large_output_scrolls_in_a_box_with_the_badges_on_top(lab: Lab, page: Page) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python", nth=BIG).click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()

    output = output_of(page, BIG)
    summary = output.locator(".jp-gitpilot-result-summary")
    expect(summary).to_contain_text("truncated", timeout=60_000)
    text = output.locator(".jp-gitpilot-output-text")
    box, badges = text.bounding_box(), summary.bounding_box()
    assert box is not None and badges is not None
    assert box["height"] < 600, box  # a max height, not a 75,000 px block
    assert badges["y"] < box["y"]  # the badges sit above the output
    scroll_height = text.evaluate("node => node.scrollHeight")
    assert scroll_height > 10 * box["height"]  # the rest is reached by scrolling
    screenshot(page.locator(".jp-MarkdownCell").nth(6), "run-large-output-light")


def test_risky_plan_starts_on_cancel_and_enter_never_approves(lab: Lab, page: Page) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python", nth=RISKY).click()
    dialog = plan_dialog(page)
    expect(dialog).to_contain_text("os.system")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    approve = dialog.get_by_role("button", name=APPROVE)
    expect(approve).to_be_disabled()
    screenshot(page, "plan-risky-light")

    page.keyboard.press("Enter")  # Enter takes the safe choice
    expect(dialog).to_be_hidden()
    expect(output_of(page, RISKY)).to_have_count(0)

    run_button(page, "python", nth=RISKY).click()
    dialog = plan_dialog(page)
    consent = dialog.get_by_role("checkbox")
    consent.check()
    expect(approve).to_be_enabled()
    approve.focus()
    page.keyboard.press("Enter")  # still not Enter: a click (or Space) is the deliberate act
    expect(dialog).to_be_visible()
    approve.click()
    output = output_of(page, RISKY)
    # As in a notebook cell, the last expression's value (os.system's status) follows the output.
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("risky-ran\n0")


def test_switching_to_pass_through_asks_first_and_its_plans_warn(lab: Lab, page: Page) -> None:
    run_palette_command(page, "Use Pass-through Sandbox")
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("no isolation")
    expect(dialog).to_contain_text("as you")
    expect(dialog).to_contain_text("network is not blocked")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    screenshot(page, "pass-through-confirm-light")
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: Local")
    assert lab.api("GET", "api/sandbox/status").json()["settings"]["backend"] == "subprocess"

    run_palette_command(page, "Use Pass-through Sandbox")
    page.locator(".jp-Dialog").get_by_role(
        "button", name=re.compile("Switch to Pass-through")
    ).click()
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: Pass-through")
    expect(notification(page, "Saved. Runs are no longer contained")).to_be_visible()

    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python").click()
    plan = plan_dialog(page)
    high = plan.locator(".jp-gitpilot-plan-warnings li").filter(
        has=page.locator(".jp-gitpilot-badge-high")
    )
    expect(high.first).to_contain_text(re.compile("isolation", re.IGNORECASE))
    expect(plan.get_by_role("button", name="Cancel")).to_be_focused()
    expect(plan.get_by_role("button", name=APPROVE)).to_be_disabled()
    screenshot(page, "plan-pass-through-light")
    plan.get_by_role("button", name="Cancel").click()


def test_file_runs_share_one_pane_and_report_through_notifications(lab: Lab, page: Page) -> None:
    for attempt in range(2):
        page.locator(".jp-DirListing-item", has_text=DEMO_SCRIPT).click(button="right")
        page.get_by_role("menuitem", name="Run in Sandbox").click()
        plan_dialog(page).get_by_role("button", name=APPROVE).click()
        # The outcome arrives as a notification (it replaces the one with progress and Stop).
        toast = notification(page, re.compile(rf"{DEMO_SCRIPT} ran in"))
        expect(toast).to_be_visible(timeout=30_000)
        pane = page.locator(".jp-gitpilot-run-tab")
        expect(pane.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")
        if attempt == 0:
            screenshot(page, "run-file-light")
    expect(page.locator(".jp-gitpilot-run-tab")).to_have_count(1)
    expect(page.get_by_role("tab", name=f"▶ {DEMO_SCRIPT}")).to_have_count(1)


def test_run_results_survive_reopening_the_notebook(lab: Lab, page: Page) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python").click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    expect(output_of(page, 0).locator(".jp-gitpilot-output-text")).to_have_text("4\n")

    page.reload()
    open_file(page, lab, DEMO_NOTEBOOK)
    output = output_of(page, 0)
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("4\n")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("earlier run")
    # Kept in the browser, not in the notebook: the file on the server has no trace of it.
    saved = lab.api("GET", f"api/contents/{DEMO_NOTEBOOK}").json()["content"]
    assert all(not cell["metadata"] for cell in saved["cells"])
    # Clear forgets it too: reopened once more, the block shows no result.
    output.get_by_role("button", name="Clear the output").click()
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("")
    page.reload()
    open_file(page, lab, DEMO_NOTEBOOK)
    expect(run_button(page, "python")).to_be_visible()  # decorated: a kept run is shown by now
    expect(output_of(page, 0)).to_have_count(0)


def test_saving_matrixlab_after_not_reachable_warns_first(lab: Lab, page: Page) -> None:
    panel = open_settings_from_menu(page)
    panel.get_by_label("Runner URL").fill(f"http://127.0.0.1:{free_port()}")
    panel.get_by_role("button", name="Test connection").click()
    expect(panel.locator(".jp-gitpilot-report")).to_contain_text("Not reachable")
    panel.get_by_role("radio", name=re.compile("^MatrixLab")).check()
    panel.get_by_role("button", name="Save").click()

    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("did not answer the connection test")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    screenshot(page, "panel-unreachable-warning-light")
    dialog.get_by_role("button", name="Cancel").click()
    expect(panel.get_by_role("status")).to_have_text("Not saved.")
    assert lab.api("GET", "api/sandbox/status").json()["settings"]["backend"] == "subprocess"


def test_settings_editor_page_holds_the_servers_settings(lab: Lab, page: Page) -> None:
    # Changed elsewhere (the CLI, a notebook): the lab's page shows the server's value.
    assert lab.api("PUT", "api/sandbox/config", json={"timeout_sec": 75}).status_code == 200
    page.reload()
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: Local", timeout=90_000)
    page.get_by_role("menuitem", name="Settings", exact=True).click()
    page.get_by_role("menuitem", name=re.compile("^Settings Editor")).click()
    page.locator(".jp-PluginList").get_by_text("Sandbox", exact=True).click()
    form = page.locator(".jp-SettingsPanel")
    field = form.locator('input[id$="plugin_timeout_sec"]')
    expect(field).to_have_value("75")
    backend = form.locator('select[id$="plugin_backend"]')
    expect(backend.locator("option:checked")).to_have_text("Local")
    screenshot(page, "settings-editor-light")

    # Edited on the page: saved on the server (only that field), and the lab says so.
    field.fill("45")
    field.press("Tab")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if lab.api("GET", "api/sandbox/config").json()["timeout_sec"] == 45:
            break
        page.wait_for_timeout(500)
    assert lab.api("GET", "api/sandbox/config").json()["timeout_sec"] == 45
    expect(notification(page, "Sandbox settings saved.")).to_be_visible()

    # Pass-through from the page asks first too; Cancel puts the page back.
    backend.select_option(label="Pass-through (no isolation)")
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("no isolation")
    dialog.get_by_role("button", name="Cancel").click()
    expect(backend.locator("option:checked")).to_have_text("Local")
    assert lab.api("GET", "api/sandbox/config").json()["backend"] == "subprocess"
    # Confirmed: the page sends the user's yes with the change (the server refuses it without).
    backend.select_option(label="Pass-through (no isolation)")
    dialog.get_by_role("button", name=re.compile("Switch to Pass-through")).click()
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: Pass-through")
    assert lab.api("GET", "api/sandbox/config").json()["backend"] == "off"
