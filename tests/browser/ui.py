"""What a user does in the lab, in words the tests read: open the panel, click ▶ Run, approve."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

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
            # The palette can close again while the lab restores its layout: retry soon, not after
            # Playwright's default 30 s.
            search.fill(label, timeout=5_000)
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


# axe-core's color-contrast finds nothing to check inside JupyterLab's widgets (its
# visibility test rejects them), so contrast is measured here as WCAG 2 defines it:
# each text's colour against the first opaque background under it.
CONTRAST_JS = """
root => {
  const rgba = text => (text.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => {
    const c = [r, g, b].map(v => v / 255)
      .map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const over = (top, under) => {
    const a = top.length > 3 ? top[3] : 1;
    return [0, 1, 2].map(i => top[i] * a + under[i] * (1 - a));
  };
  const background = node => {
    const layers = [];
    for (let e = node; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c.length > 3 && c[3] === 0) continue;
      layers.push(c);
      if (c.length === 3 || c[3] === 1) break;
    }
    return layers.reverse().reduce((under, top) => over(top, under), [255, 255, 255]);
  };
  const found = [];
  for (const e of [root, ...root.querySelectorAll('*')]) {
    const own = Array.from(e.childNodes).some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own || !e.getClientRects().length) continue;
    const style = getComputedStyle(e);
    if (style.visibility === 'hidden' || Number(style.opacity) === 0) continue;
    const bg = background(e);
    const fg = over(rgba(style.color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    const ratio = (hi + 0.05) / (lo + 0.05);
    const size = parseFloat(style.fontSize);
    const large = size >= 24 || (size >= 18.66 && Number(style.fontWeight) >= 700);
    const disabled = e.closest('button:disabled, input:disabled');
    found.push({text: e.textContent.trim().slice(0, 40), ratio: Math.round(ratio * 100) / 100,
                need: large ? 3 : 4.5, size, disabled: !!disabled});
  }
  return found;
}
"""


def low_contrast(page: Page, selector: str) -> list[dict[str, Any]]:
    """The texts under ``selector`` below WCAG AA (disabled controls are exempt)."""
    texts: list[dict[str, Any]] = page.locator(selector).first.evaluate(CONTRAST_JS)
    assert texts, f"no text measured under {selector}"
    return [t for t in texts if t["ratio"] < t["need"] and not t["disabled"]]
