"""Benchmark: a 512 KiB flood rendered by ▶ Run in a real JupyterLab and chromium.

Reuses the browser suite's lab and flood (tests/browser): the longest gap between
animation frames while the run streams says how long the page froze; the target is
< 1 s of freeze (the page stays responsive), with the run and render time beside it.
"""

from __future__ import annotations

import statistics

from playwright.sync_api import sync_playwright

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.browser.flood import run_flood
from tests.browser.lab import start_lab

from .common import Context, Measure

BENCH = "lab flood"
FREEZE_TARGET_MS = 1000


def run(ctx: Context) -> list[Measure]:
    """Run the flood a few times in one lab; the median and worst numbers."""
    if not CHROMIUM.exists():
        return [Measure(BENCH, "skipped", 0, "", note=f"{CHROMIUM} is not installed")]
    lab = start_lab(ctx.workdir / "lab-flood")
    runs = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            for _ in range(2 if ctx.quick else 5):
                page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
                page.set_default_timeout(90_000)
                runs.append(run_flood(lab, page))
                page.context.close()
            browser.close()
    finally:
        lab.stop()
    gaps = [watch["maxGap"] for watch in runs]
    took = [watch["took"] for watch in runs]
    worst = max(gaps)
    return [
        Measure(
            BENCH,
            "longest frame gap (worst)",
            round(worst),
            "ms",
            f"< {FREEZE_TARGET_MS} ms",
            worst < FREEZE_TARGET_MS,
            note=f"{len(runs)} runs, median {statistics.median(gaps):.0f} ms",
        ),
        Measure(
            BENCH,
            "run and render (median)",
            round(statistics.median(took)),
            "ms",
            note="Approve to summary, 512,000 characters shown",
        ),
    ]
