"""The settings panel and the status bar, against a real lab server."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import Page, Response, expect

from .lab import Lab, free_port
from .ui import (
    low_contrast,
    open_settings_from_menu,
    run_palette_command,
    screenshot,
    set_theme,
)

pytestmark = pytest.mark.browser

SECRET = "tok-5up3r-s3cr3t-0123456789"
OUT_OF_RANGE = "Enter a whole number of seconds from 1 to 600."


def rgb(color: str) -> str:
    """A theme's ``#rrggbb`` as computed styles give it (``rgb(r, g, b)``)."""
    hexa = color.strip().lstrip("#")
    return "rgb({}, {}, {})".format(*(int(hexa[i : i + 2], 16) for i in (0, 2, 4)))


def body_of(response: Response) -> str | None:
    """A response's body, or None for those that have none to read (redirects, websockets)."""
    try:
        return response.text()
    except PlaywrightError:
        return None


def test_panel_switches_backend_and_status_bar_follows(lab: Lab, page: Page) -> None:
    panel = open_settings_from_menu(page)
    # No override: no "set by the environment" badge, not even an empty pill.
    expect(panel.locator(".jp-gitpilot-header")).to_be_visible()
    expect(panel.locator(".jp-gitpilot-header .jp-gitpilot-badge")).to_be_hidden()
    screenshot(panel, "panel-light")
    dead_runner = f"http://127.0.0.1:{free_port()}"

    panel.get_by_role("radio", name=re.compile("^MatrixLab")).check()
    panel.get_by_label("Runner URL").fill(dead_runner)
    panel.get_by_role("button", name="Save").click()
    expect(panel.get_by_role("status")).to_contain_text("Saved.")

    status = lab.api("GET", "api/sandbox/status").json()
    assert status["backend"] == "matrixlab"
    assert status["settings"]["matrixlab_url"] == dead_runner
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: MatrixLab — unreachable")

    # Test connection answers in words, with a hint, never as raw JSON.
    panel.get_by_role("button", name="Test connection").click()
    report = panel.locator(".jp-gitpilot-report")
    expect(report).to_contain_text("Not reachable")
    assert "{" not in report.inner_text()

    # Lifecycle buttons are off on this server, and the panel says why.
    expect(panel.get_by_role("button", name="Install")).to_be_disabled()
    expect(panel).to_contain_text("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1")

    run_palette_command(page, "Use Local Sandbox")
    expect(page.locator(".jp-gitpilot-status")).to_have_text("Sandbox: Local")
    expect(panel.get_by_role("radio", name=re.compile("^Local"))).to_be_checked()
    assert lab.api("GET", "api/sandbox/status").json()["backend"] == "subprocess"


def test_a_time_limit_out_of_range_is_marked_and_cannot_be_saved(lab: Lab, page: Page) -> None:
    panel = open_settings_from_menu(page)
    field = panel.get_by_label(re.compile(r"^Time limit \(seconds, 1\u2013600\)$"))
    field.fill("9000")
    expect(field).to_have_attribute("aria-invalid", "true")
    expect(field).to_have_accessible_description(OUT_OF_RANGE)
    expect(panel.get_by_role("alert")).to_have_text(OUT_OF_RANGE)
    expect(panel.get_by_role("button", name="Save")).to_be_disabled()
    field.fill("45")
    expect(field).not_to_have_attribute("aria-invalid", "true")
    expect(panel.get_by_role("alert")).to_have_count(0)
    panel.get_by_role("button", name="Save").click()
    expect(panel.get_by_role("status")).to_contain_text("Saved.")
    assert lab.api("GET", "api/sandbox/status").json()["settings"]["timeout_sec"] == 45


def test_saved_token_shows_as_bullets_and_never_comes_back(lab: Lab, page: Page) -> None:
    answers: list[Response] = []
    page.on("response", lambda response: answers.append(response))

    page.locator(".jp-gitpilot-status").click()  # the status bar item opens the panel
    panel = page.locator("#gitpilot-sandbox-settings")
    token = panel.get_by_label("Bearer token")
    expect(token).to_have_attribute("placeholder", "not set")
    token.fill(SECRET)
    panel.get_by_role("button", name="Save").click()
    expect(panel.get_by_role("status")).to_contain_text("Saved.")

    assert lab.api("GET", "api/sandbox/status").json()["has_token"] is True
    expect(token).to_have_value("")
    expect(token).to_have_attribute("placeholder", "••••••••")
    expect(token).to_have_attribute("type", "password")

    # Open it again from the palette: the form is refilled from the server, still bullets.
    page.get_by_role("tab", name="Sandbox Settings").get_by_title("Close").click()
    run_palette_command(page, "Sandbox Settings…")
    expect(token).to_have_attribute("placeholder", "••••••••")
    expect(token).to_have_value("")

    set_theme(page, "JupyterLab Dark")
    screenshot(panel, "panel-dark")
    set_theme(page, "JupyterLab Light")

    bodies = [body for body in map(body_of, answers) if body is not None]
    sandbox = [answer for answer in answers if "/api/sandbox/" in answer.url]
    assert len(sandbox) >= 4 and all(body_of(answer) is not None for answer in sandbox)
    assert any('"has_token": true' in body for body in bodies)
    assert not [body for body in bodies if SECRET in body]

    panel.get_by_role("button", name="Clear").click()
    panel.get_by_role("button", name="Save").click()
    expect(token).to_have_attribute("placeholder", "not set")
    assert lab.api("GET", "api/sandbox/status").json()["has_token"] is False


def test_pass_through_from_the_panel_is_saved_once_confirmed(lab: Lab, page: Page) -> None:
    panel = open_settings_from_menu(page)
    panel.get_by_role("radio", name=re.compile("^Pass-through")).check()
    panel.get_by_role("button", name="Save").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("no isolation")
    # The server refuses the switch unless the request carries the user's yes.
    refused = lab.api("PUT", "api/sandbox/config", json={"backend": "off"})
    assert refused.status_code == 409 and refused.json()["code"] == "confirmation_required"
    dialog.get_by_role("button", name=re.compile("Switch to Pass-through")).click()
    status = page.locator(".jp-gitpilot-status")
    expect(status).to_have_text("Sandbox: Pass-through")
    assert lab.api("GET", "api/sandbox/config").json()["backend"] == "off"
    # Saved, but no success: a warning toast says that runs are no longer contained.
    toast = page.locator(".Toastify__toast").filter(has_text="Runs are no longer contained")
    expect(toast).to_be_visible()
    expect(toast).to_have_class(re.compile(r"\bToastify__toast--warning\b"))
    expect(page.locator(".Toastify__toast--success")).to_have_count(0)
    # It looks like a warning: a sign before the words, the theme's warning colours, what
    # it means and how to leave it on hover, and AA contrast in both themes.
    expect(status).to_have_class(re.compile(r"\bjp-mod-warn\b"))
    expect(status).to_have_attribute("title", re.compile("Warning: Pass-through has no isolation"))
    expect(status).to_have_attribute("title", re.compile("choose Local or MatrixLab"))
    assert status.evaluate("node => getComputedStyle(node, '::before').content") == '"⚠ "'
    for theme in ("JupyterLab Light", "JupyterLab Dark"):
        set_theme(page, theme)
        warning = page.evaluate(
            "getComputedStyle(document.body).getPropertyValue('--jp-warn-color3')"
        )
        assert status.evaluate("node => getComputedStyle(node).backgroundColor") == rgb(warning)
        assert low_contrast(page, ".jp-gitpilot-status") == []
        screenshot(status, f"status-pass-through-{theme.split()[-1].lower()}")
    set_theme(page, "JupyterLab Light")
