"""A 512 KiB flood streamed into a ▶ Run block, timed in the page (tests and benchmarks).

A ``requestAnimationFrame`` loop records the longest gap between frames (how long the
page froze) and a PerformanceObserver the long tasks, while the run streams and renders.
"""

from __future__ import annotations

import json
from typing import Any

from playwright.sync_api import Page, expect

from .lab import Lab
from .ui import open_file, plan_dialog, run_button

APPROVE = "Approve this plan and run it in the sandbox"
FLOOD_NOTEBOOK = "flood.ipynb"
#: 8192 lines of 64 bytes, flushed one by one: 512 KiB in thousands of stream chunks.
FLOOD_CODE = (
    "import sys\n"
    "for i in range(8192):\n"
    "    sys.stdout.write(f'{i:06d} ' + 'x' * 56 + '\\n')\n"
    "    sys.stdout.flush()\n"
)
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


def flood_notebook() -> str:
    """A notebook whose one Markdown cell holds the flood as a ▶ Run block."""
    return markdown_notebook("flood", f"# Flood\n\n```python\n{FLOOD_CODE}```\n")


def markdown_notebook(cell_id: str, source: str) -> str:
    """A notebook of one Markdown cell (its ▶ Run blocks are the fences in ``source``)."""
    cell = {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": source}
    return json.dumps(
        {
            "cells": [cell],
            # A kernelspec, or the lab asks which kernel to start (a dialog over the page).
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def run_flood(lab: Lab, page: Page) -> dict[str, Any]:
    """Run the flood from ▶ Run and answer what the page measured.

    ``took`` (ms from Approve to the summary), ``maxGap`` (the longest frame gap, ms),
    ``longTasks`` and ``longTaskMs``, and ``shown`` (characters in the output box).
    """
    write_file(lab, FLOOD_NOTEBOOK, flood_notebook())
    open_file(page, lab, FLOOD_NOTEBOOK)
    run_button(page, "python").click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    page.evaluate(WATCH_FRAMES)
    started = page.evaluate("performance.now()")
    output = page.locator(".jp-gitpilot-output")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0", timeout=120_000)
    watch: dict[str, Any] = page.evaluate(
        """started => { const w = window.__gitpilotWatch; w.running = false;
        return { ...w, took: performance.now() - started }; }""",
        started,
    )
    watch["shown"] = page.evaluate(
        "document.querySelector('.jp-gitpilot-output-text').textContent.length"
    )
    return watch
