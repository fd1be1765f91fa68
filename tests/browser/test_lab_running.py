"""Sandbox sessions in JupyterLab's own Running panel: a session started over REST is listed
under "Sandbox sessions" (its state on hover), its context menu restarts it, its Shut Down
stops it, and Shut Down All (after the lab's confirm) stops the rest, each checked through
the REST API."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Locator, Page, expect

from .lab import Lab
from .ui import screenshot

pytestmark = pytest.mark.browser

SESSIONS = ("running-a", "running-b", "running-c")


def listed(lab: Lab) -> list[str]:
    """The names of the sessions the server lists for this user."""
    answer = lab.api("GET", "api/sandbox/sessions")
    assert answer.status_code == 200, answer.text
    return [session["name"] for session in answer.json()["sessions"]]


def started_at(lab: Lab) -> dict[str, float]:
    """When each of this user's sessions (last) started."""
    answer = lab.api("GET", "api/sandbox/sessions")
    assert answer.status_code == 200, answer.text
    return {session["name"]: session["started_at"] for session in answer.json()["sessions"]}


def until_listed(lab: Lab, names: list[str], seconds: float = 30) -> None:
    """Wait until the server lists exactly ``names`` (a stop ends the kernel first)."""
    deadline = time.monotonic() + seconds
    while (now := listed(lab)) != names and time.monotonic() < deadline:
        time.sleep(0.2)
    assert now == names, json.dumps(now)


@pytest.fixture
def sessions(lab: Lab) -> Iterator[tuple[str, ...]]:
    """Three idle sessions of this user, stopped afterwards whatever the test left."""
    try:
        for name in SESSIONS:
            started = lab.api("POST", "api/sandbox/sessions", json={"name": name})
            if started.status_code == 503:
                pytest.skip(f"this host cannot hold a session: {started.json().get('message')}")
            assert started.status_code == 201, started.text
        yield SESSIONS
    finally:
        for name in SESSIONS:
            lab.api("DELETE", f"api/sandbox/sessions/{name}")


def running_panel(page: Page) -> Locator:
    """Open the lab's Running panel (the left sidebar tab); answers our section's items."""
    page.locator('.jp-SideBar .lm-TabBar-tab[data-id="jp-running-sessions"]').click()
    panel = page.locator("#jp-running-sessions")
    expect(panel).to_be_visible()
    return panel


def test_running_panel_lists_sessions_restarts_and_shuts_them_down(
    lab: Lab, page: Page, sessions: tuple[str, ...]
) -> None:
    first, *rest = sessions
    panel = running_panel(page)
    title = panel.locator(".lm-AccordionPanel-title", has_text="Sandbox sessions")
    expect(title).to_be_visible()
    items = panel.locator(".jp-gitpilot-running-session")
    # Listed within a poll of the panel showing, in the order they started.
    expect(items).to_have_count(3, timeout=15_000)
    item = panel.locator(f'.jp-gitpilot-running-session[data-context="{first}"]')
    expect(item).to_contain_text(first)
    expect(item).to_contain_text("idle")
    label = item.locator(".jp-RunningSessions-itemLabel")
    tooltip = label.get_attribute("title") or ""
    assert f"Python session {first}" in tooltip and "idle, last used" in tooltip, tooltip
    screenshot(panel, "running-panel-sessions-light")

    # Its name opens the Sandbox Sessions tab, on that session's row.
    label.click()
    tab = page.locator("#gitpilot-sandbox-sessions")
    expect(tab.locator(f'[data-name="{first}"]')).to_contain_text("0 cells")
    expect(tab.locator(f'[data-name="{first}"] button').first).to_be_focused()
    panel = running_panel(page)

    # Restart from the item's context menu: the lab says so; the session starts afresh.
    before = started_at(lab)
    label.click(button="right")
    page.get_by_role("menuitem", name="Restart Sandbox Session").click()
    expect(page.locator(".Toastify")).to_contain_text(f"Session {first} restarted")
    after = started_at(lab)
    assert sorted(after) == sorted(sessions) and after[first] > before[first], after

    # Shut Down on one item stops that session on the server; the item leaves.
    # (The lab shows an item's Shut Down button while the pointer is over the item.)
    item.hover()
    item.locator(".jp-RunningSessions-itemShutdown").click()
    until_listed(lab, list(rest))
    expect(items).to_have_count(2)

    # Shut Down All asks first (the lab's own confirm), then stops the rest.
    # (The section's toolbar sits in its title bar.)
    title.hover()
    title.locator(".jp-RunningSessions-shutdownAll").click()
    confirm = page.locator(".jp-Dialog")
    expect(confirm).to_contain_text("Stop all 2 of your sandbox sessions?")
    confirm.get_by_role("button", name="Shut Down All").click()
    until_listed(lab, [])
    expect(items).to_have_count(0)
