"""What a user does in the lab, in words the tests read: open the panel, click ▶ Run, approve."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Locator, Page, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from .lab import Lab

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"


def screenshot(target: Page | Locator, name: str) -> Path:
    """Save a screenshot under test-artifacts/browser (the README's are copied from here)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    target.screenshot(path=str(path))
    return path


def set_theme(page: Page, theme: str) -> None:
    """Switch the lab theme with its own command (the test server exposes the app)."""
    page.evaluate(
        "theme => window.jupyterapp.commands.execute('apputils:change-theme', {theme})", theme
    )
    light = "false" if theme.endswith("Dark") else "true"
    expect(page.locator("body")).to_have_attribute("data-jp-theme-light", light)
    expect(page.locator("#jupyterlab-splash")).to_have_count(0)  # shown while a theme loads


def open_file(page: Page, lab: Lab, path: str) -> None:
    """Open a file of the lab's root by its URL, as a bookmarked link would."""
    page.goto(lab.page_url(f"lab/tree/{path}"))


def open_settings_from_menu(page: Page) -> Locator:
    """Settings menu → Sandbox Settings…; answers the panel."""
    page.get_by_role("menuitem", name="Settings", exact=True).click()
    page.get_by_role("menuitem", name="Sandbox Settings…").click()
    panel = page.locator("#gitpilot-sandbox-settings")
    expect(panel.get_by_role("radio", name=re.compile("^Local"))).to_be_checked()
    return panel


def run_palette_command(page: Page, label: str) -> None:
    """Open the command palette, type the command's label and click it.

    On a loaded machine the shortcut can land before the lab has focus, or the
    palette can render late and a second press closes it again: each attempt
    starts from a closed palette and checks that the item is offered.
    """
    search = page.locator(".lm-CommandPalette-input")
    # Click the item itself: Enter would run whichever item is active before the filter applies.
    item = page.locator(
        ".lm-CommandPalette-itemLabel", has_text=re.compile(f"^{re.escape(label)}$")
    ).first
    for _ in range(3):
        if not search.is_visible():
            page.keyboard.press("Control+Shift+C")
        try:
            expect(search).to_be_visible(timeout=5_000)
            search.fill(label)
            expect(item).to_be_visible(timeout=10_000)
            # The list re-renders while the filter settles: a click can meet a detached item.
            item.click(timeout=10_000)
        except (AssertionError, PlaywrightTimeoutError):
            page.keyboard.press("Escape")
            continue
        return
    slug = re.sub(r"\W+", "-", label)
    screenshot(page, f"palette-without-{slug}")
    raise AssertionError(f"the command palette never offered {label!r}")


def run_button(page: Page, language: str, nth: int = 0) -> Locator:
    """The ▶ Run button of the nth ``language`` code block on the page."""
    return page.get_by_role("button", name=f"Run {language} code block in the sandbox").nth(nth)


def plan_dialog(page: Page) -> Locator:
    """The approval dialog, once it shows."""
    dialog = page.locator(".jp-gitpilot-plan-dialog")
    expect(dialog).to_be_visible()
    return dialog
