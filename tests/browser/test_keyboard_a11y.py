"""The approval dialog by keyboard and screen reader (issue 34): focus stays in it, the
tick box is reached by Tab, Escape gives the focus back to ▶ Run, an unreachable
MatrixLab never defaults to approve, axe-core finds no serious naming violation, and
every text and badge measures WCAG AA contrast in the light and dark themes."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.support.system import require_system

from .conftest import BUILT_EXTENSION
from .lab import DEMO_NOTEBOOK, Lab, free_port, start_lab
from .ui import low_contrast, open_file, plan_dialog, run_button, set_theme

pytestmark = pytest.mark.browser

# The axe rules for an accessible name on every control.
NAME_RULES = [
    "button-name",
    "label",
    "aria-input-field-name",
    "aria-toggle-field-name",
    "link-name",
    "summary-name",
]
APPROVE = "Approve this plan and run it in the sandbox"
LONG_BLOCK = 2  # the third python fence: sleeps 90 s (stopped here)
RISKY_BLOCK = 4  # the fifth python fence of the demo notebook: os.system(...)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A lab serving this checkout's build of the extension (first on JUPYTER_PATH)."""
    share = tmp_path_factory.mktemp("share")
    (share / "labextensions").mkdir()
    name = json.loads((BUILT_EXTENSION / "package.json").read_text())["name"]
    (share / "labextensions" / name).symlink_to(BUILT_EXTENSION)
    server = start_lab(tmp_path_factory.mktemp("lab"), env={"JUPYTER_PATH": str(share)})
    yield server
    server.stop()


def axe_script() -> Path:
    """axe-core as the axe-playwright-python package ships it."""
    spec = importlib.util.find_spec("axe_playwright_python")
    origin = spec.origin if spec else None
    require_system("axe-playwright-python", origin is not None, "pip install -e '.[test]'")
    assert origin is not None
    return Path(origin).parent / "axe.min.js"


def name_violations(page: Page, selector: str) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations of NAME_RULES under ``selector``."""
    page.add_script_tag(path=str(axe_script()))
    result: dict[str, Any] = page.evaluate(
        "([selector, rules]) => axe.run(document.querySelector(selector),"
        " {runOnly: {type: 'rule', values: rules}})",
        [selector, NAME_RULES],
    )
    assert result["passes"], "axe checked no control: the selector matched nothing named"
    return [
        {"id": v["id"], "nodes": [n["html"][:120] for n in v["nodes"]]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def focused(page: Page) -> str:
    """What has the focus: its role-ish tag and accessible text, for messages."""
    return str(
        page.evaluate(
            "() => { const e = document.activeElement;"
            " return e ? `${e.tagName.toLowerCase()}:${e.getAttribute('aria-label') ||"
            " e.textContent || e.getAttribute('name') || ''}`.slice(0, 80) : 'none' }"
        )
    )


def inside(dialog: Locator) -> bool:
    return bool(dialog.evaluate("node => node.contains(document.activeElement)"))


def open_risky_by_keyboard(page: Page, lab: Lab) -> tuple[Locator, Locator]:
    """Focus the risky block's ▶ Run and press Enter; answers the button and the dialog."""
    open_file(page, lab, DEMO_NOTEBOOK)
    button = run_button(page, "python", RISKY_BLOCK)
    expect(button).to_be_visible()
    button.focus()
    page.keyboard.press("Enter")
    dialog = plan_dialog(page)
    expect(dialog).to_contain_text("Risky")
    return button, dialog


def test_tab_stays_in_the_risky_dialog_and_reaches_the_tick_box(lab: Lab, page: Page) -> None:
    _, dialog = open_risky_by_keyboard(page, lab)
    box = dialog.get_by_role("checkbox")
    seen: list[str] = []
    reached = False
    for _ in range(12):
        page.keyboard.press("Tab")
        seen.append(focused(page))
        assert inside(dialog), f"Tab left the dialog after {seen}"
        reached = reached or bool(box.evaluate("node => node === document.activeElement"))
    assert reached, f"Tab never reached the tick box: {seen}"
    for _ in range(12):
        page.keyboard.press("Shift+Tab")
        assert inside(dialog), f"Shift+Tab left the dialog at {focused(page)}"
    # Ticked by Space, Approve becomes a Tab stop too.
    box.focus()
    page.keyboard.press("Space")
    expect(box).to_be_checked()
    approve = dialog.get_by_role("button", name=APPROVE)
    reached = False
    for _ in range(12):
        page.keyboard.press("Tab")
        assert inside(dialog)
        reached = reached or bool(approve.evaluate("node => node === document.activeElement"))
    assert reached, "Tab never reached Run anyway once the box was ticked"
    page.keyboard.press("Escape")


def test_escape_gives_the_focus_back_to_run(lab: Lab, page: Page) -> None:
    button, dialog = open_risky_by_keyboard(page, lab)
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    expect(button).to_be_focused()


def test_an_unreachable_matrixlab_defaults_to_cancel(lab: Lab, page: Page) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    answer = lab.api(
        "PUT", "api/sandbox/config", json={"backend": "matrixlab", "matrixlab_url": closed}
    )
    assert answer.status_code == 200, answer.text
    open_file(page, lab, DEMO_NOTEBOOK)
    run_button(page, "python").click()
    dialog = plan_dialog(page)
    expect(dialog.get_by_role("alert")).to_contain_text("unreachable")
    expect(dialog.get_by_role("alert")).to_contain_text("Start the Runner")
    expect(dialog.get_by_role("button", name="Cancel")).to_be_focused()
    page.keyboard.press("Enter")
    expect(dialog).to_have_count(0)
    assert lab.api("GET", "api/sandbox/plans").json()["plans"] == []


@pytest.mark.parametrize("theme", ["JupyterLab Light", "JupyterLab Dark"])
def test_the_plan_dialog_and_badges_meet_aa(lab: Lab, page: Page, theme: str) -> None:
    open_file(page, lab, DEMO_NOTEBOOK)
    expect(run_button(page, "python")).to_be_visible()
    set_theme(page, theme)
    run_button(page, "python", RISKY_BLOCK).click()
    dialog = plan_dialog(page)
    assert name_violations(page, ".jp-gitpilot-plan-dialog") == []
    assert low_contrast(page, ".jp-gitpilot-plan-dialog") == []
    dialog.get_by_role("button", name="Cancel").click()
    # The badges of a finished run (exit 0), then the Stop button and the stopped badge.
    run_button(page, "python").click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    summary = page.locator(".jp-gitpilot-result-summary").first
    expect(summary).to_contain_text("exit 0")
    assert low_contrast(page, ".jp-gitpilot-result-summary") == []
    run_button(page, "python", LONG_BLOCK).click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    stop = page.get_by_role("button", name="Stop the run")
    expect(stop).to_be_visible()
    assert low_contrast(page, "button.jp-gitpilot-stop-button") == []
    stop.click()
    stopped = page.locator(".jp-gitpilot-result-summary", has_text="stopped")
    expect(stopped).to_be_visible()
    assert low_contrast(page, ".jp-gitpilot-result-summary >> text=stopped") == []
    set_theme(page, "JupyterLab Light")
