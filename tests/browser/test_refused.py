"""▶ Run on a host that cannot contain a snippet: the lab says why and how to fix it, runs nothing.

A lab of its own, started with ``GITPILOT_SANDBOX_ISOLATION=none`` (the shape of a host
with no engine: the subprocess backend refuses with ``409 containment_unavailable``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from .lab import DEMO_NOTEBOOK, Lab, start_lab
from .ui import open_file, run_button, screenshot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab whose subprocess backend has no engine to contain a run."""
    server = start_lab(
        tmp_path_factory.mktemp("refused-lab"), env={"GITPILOT_SANDBOX_ISOLATION": "none"}
    )
    yield server
    server.stop()


def test_run_on_an_uncontainable_host_says_why_and_runs_nothing(lab: Lab, page: Page) -> None:
    # The status bar says so before anyone clicks ▶ Run, with the reason on hover.
    status = page.locator(".jp-gitpilot-status")
    expect(status).to_have_text("Sandbox: Local — error")
    expect(status).to_have_class(re.compile("jp-mod-failed"))
    expect(status).to_have_attribute("title", re.compile("cannot keep a snippet away"))

    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python").click()

    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("This host cannot contain the snippet")
    expect(dialog).to_contain_text("cannot keep a snippet away from your files")
    expect(dialog).to_contain_text("To fix: unset GITPILOT_SANDBOX_ISOLATION")
    expect(dialog).to_contain_text("matrixlab backend")
    # Nothing to approve: the refusal comes before any plan exists.
    approve = dialog.get_by_role("button", name="Approve this plan and run it in the sandbox")
    expect(approve).to_have_count(0)
    screenshot(page, "run-refused-uncontained")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page.locator(".jp-gitpilot-output")).to_have_count(0)
    assert lab.api("GET", "api/sandbox/plans").json()["plans"] == []
