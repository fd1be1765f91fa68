"""The demo notebooks open clean in JupyterLab: no unsaved-changes mark before the user types.

A notebook that JupyterLab rewrites on open (cell ids, kernelspec, language_info) shows as
modified at once and asks to be saved on close; issue 17 found the demo notebooks did that.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from .lab import Lab
from .ui import open_file, screenshot

pytestmark = pytest.mark.browser

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[path.stem for path in NOTEBOOKS])
def test_a_demo_notebook_opens_without_unsaved_changes(
    lab: Lab, page: Page, notebook: Path
) -> None:
    shutil.copy(notebook, lab.server.root_dir / notebook.name)
    open_file(page, lab, notebook.name)
    tab = page.locator(".lm-TabBar-tab.jp-mod-current", has_text=notebook.name)
    expect(tab).to_be_visible()
    # The kernel's first answer is when JupyterLab fills in language_info: wait for it.
    expect(page.locator(".jp-StatusBar-TextItem", has_text="Idle").first).to_be_visible(
        timeout=60_000
    )
    page.wait_for_timeout(1_500)
    screenshot(page, f"demo-{notebook.stem}")
    expect(tab).not_to_have_class(re.compile(r"\bjp-mod-dirty\b"))
