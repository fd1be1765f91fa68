"""▶ Run's output in a real lab: a 512 KB flood keeps the page responsive, the result has
an elapsed time, Re-run, Copy and Clear, and new agent plans are announced."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from gitpilot_jupyter.agents import AgentSandbox

from .lab import DEMO_NOTEBOOK, Lab
from .ui import open_file, plan_dialog, run_button

pytestmark = pytest.mark.browser

APPROVE = "Approve this plan and run it in the sandbox"
FLOOD_NOTEBOOK = "flood.ipynb"
#: 8192 lines of 64 bytes, flushed one by one: 512 KiB in thousands of stream chunks.
FLOOD_CODE = (
    "import sys\n"
    "for i in range(8192):\n"
    "    sys.stdout.write(f'{i:06d} ' + 'x' * 56 + '\\n')\n"
    "    sys.stdout.flush()\n"
)
#: Before frames were batched the page froze 12-20 s on this flood; a frame that waits this
#: long means it froze again (generous: the browser shares 2 loaded cores with the run).
MAX_FRAME_GAP_MS = 3000

#: Records the longest gap between animation frames and the long tasks while a run streams.
WATCH_FRAMES = """() => {
  const watch = { maxGap: 0, longTasks: 0, longTaskMs: 0, running: true };
  let last = performance.now();
  const tick = now => {
    watch.maxGap = Math.max(watch.maxGap, now - last);
    last = now;
    if (watch.running) requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
  try {
    new PerformanceObserver(list => {
      for (const entry of list.getEntries()) {
        watch.longTasks += 1;
        watch.longTaskMs += entry.duration;
      }
    }).observe({ type: 'longtask', buffered: false });
  } catch (error) { /* no long-task timing in this browser: the frame gap still tells */ }
  window.__gitpilotWatch = watch;
}"""


def write_file(lab: Lab, path: str, text: str) -> None:
    """Put a file in the lab's root through the contents API, as an upload would."""
    answer = lab.api(
        "PUT", f"api/contents/{path}", json={"type": "file", "format": "text", "content": text}
    )
    assert answer.status_code in (200, 201), answer.text


def test_a_512_kb_flood_streams_without_freezing_the_page(lab: Lab, page: Page) -> None:
    notebook = {
        "cells": [
            {
                "cell_type": "markdown",
                "id": "flood",
                "metadata": {},
                "source": f"# Flood\n\n```python\n{FLOOD_CODE}```\n",
            }
        ],
        # A kernelspec, or the lab asks which kernel to start (a dialog over the page).
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    write_file(lab, FLOOD_NOTEBOOK, json.dumps(notebook))
    open_file(page, lab, FLOOD_NOTEBOOK)
    run_button(page, "python").click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    page.evaluate(WATCH_FRAMES)
    started = page.evaluate("performance.now()")
    output = page.locator(".jp-gitpilot-output")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0", timeout=120_000)
    watch = page.evaluate(
        """started => { const w = window.__gitpilotWatch; w.running = false;
        return { ...w, took: performance.now() - started }; }""",
        started,
    )
    shown = page.evaluate("document.querySelector('.jp-gitpilot-output-text').textContent.length")
    print(
        f"\n512 KiB flood: run and render {watch['took']:.0f} ms, longest frame gap "
        f"{watch['maxGap']:.0f} ms, {watch['longTasks']} long tasks "
        f"({watch['longTaskMs']:.0f} ms in all), {shown} characters shown"
    )
    # The run's output cap keeps 512,000 bytes of the 524,288 streamed.
    assert shown >= 500_000
    assert watch["maxGap"] < MAX_FRAME_GAP_MS, watch
    # The output stays in its scroll box, which followed it to the end.
    box = output.locator(".jp-gitpilot-output-text")
    height = box.evaluate("node => node.clientHeight")
    assert height < 1000
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
