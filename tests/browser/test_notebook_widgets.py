"""The kernel face in a real JupyterLab: the approval card and the settings panel as widgets.

The notebook's kernel is started by the lab server, so ``%%sandbox`` finds it
(``auto``) and runs through its REST API; the click on *Approve and run* goes
from the browser's widget to the kernel and the output comes back into the card.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from gitpilot_jupyter.widgets.approval import CONSENT_LABEL

from .lab import Lab
from .ui import open_file, screenshot

pytestmark = pytest.mark.browser

NOTEBOOK = "widgets.ipynb"


def _code(source: str) -> dict[str, object]:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
            "execution_count": None}  # fmt: skip


def write_notebook(lab: Lab) -> None:
    cells = [
        _code("%load_ext gitpilot_jupyter"),
        _code("%%sandbox\nimport subprocess\nprint('approved in the browser')"),
        _code("%sandbox settings"),
    ]
    notebook = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (lab.server.root_dir / NOTEBOOK).write_text(json.dumps(notebook), encoding="utf-8")


def test_card_and_panel_in_the_lab(lab: Lab, page: Page) -> None:
    write_notebook(lab)
    open_file(page, lab, NOTEBOOK)
    # Run All only once the kernel is up, as a user waits for "Idle" in the status bar.
    expect(page.get_by_role("button", name="Python 3 (ipykernel) | Idle")).to_be_visible(
        timeout=90_000
    )
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()

    card_cell = page.locator(".jp-CodeCell").nth(1)
    # A high-risk plan (it starts other programs): Run anyway waits for the tick box.
    approve = card_cell.get_by_role("button", name="Run anyway")
    reject = card_cell.get_by_role("button", name="Reject")
    consent = card_cell.get_by_role("checkbox", name=CONSENT_LABEL)
    expect(approve).to_be_visible(timeout=90_000)
    expect(approve).to_be_disabled()
    expect(card_cell).to_contain_text("subprocess")
    expect(card_cell).to_contain_text("starts other programs")
    # It says what the snippet cannot reach, as the plan's checks verified it.
    expect(card_cell).to_contain_text(
        re.compile(r"cannot reach on this host: .*~/\.ssh and the server's secret files")
    )
    screenshot(card_cell, "notebook-approval-card")

    # The keyboard alone: the card takes the focus on its safe button (Enter by habit
    # never approves), the tick box is one Shift+Tab away, and Approve waits for it.
    expect(reject).to_be_focused(timeout=30_000)
    page.keyboard.press("Shift+Tab")
    expect(consent).to_be_focused()
    expect(approve).to_be_disabled()  # skipped by Tab while the box is empty
    page.keyboard.press("Space")
    expect(consent).to_be_checked()
    expect(approve).to_be_enabled()
    page.keyboard.press("Tab")
    expect(approve).to_be_focused()
    page.keyboard.press("Tab")
    expect(reject).to_be_focused()
    page.keyboard.press("Shift+Tab")
    expect(approve).to_be_focused()
    page.keyboard.press("Enter")
    expect(card_cell).to_contain_text("approved in the browser", timeout=60_000)
    expect(card_cell).to_contain_text(
        re.compile(r"\[sandbox\] subprocess · exit 0 · \d+ ms · launched by the Jupyter server")
    )
    expect(approve).to_be_disabled()
    screenshot(card_cell, "notebook-approval-card-done")

    panel_cell = page.locator(".jp-CodeCell").nth(2)
    expect(panel_cell.get_by_text("Sandbox settings", exact=True)).to_be_visible(timeout=60_000)
    expect(panel_cell.get_by_role("radio", name="Local")).to_be_checked()
    expect(panel_cell.get_by_role("button", name="Install")).to_be_disabled()
    expect(panel_cell).to_contain_text("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1")
    screenshot(panel_cell, "notebook-settings-panel")
