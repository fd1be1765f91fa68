"""The extension speaks the lab's language: a JupyterLab switched to French shows it in French.

The French language pack (a test dependency) makes JupyterLab French; the extension's own
catalog (``gitpilot_jupyter/locale/fr_FR``) comes through the lab's translator under the
extension's domain. The status bar, the palette, the Pending Plans panel and an agent's
plan card are read in French, plural forms included.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from gitpilot_jupyter.agents import AgentSandbox

from .lab import Lab
from .ui import run_palette_command, screenshot

pytestmark = pytest.mark.browser

TRANSLATION_SETTINGS = "lab/api/settings/@jupyterlab/translation-extension:plugin"


def set_locale(lab: Lab, locale: str) -> None:
    """Choose the lab's language as Settings → Language does (a user setting)."""
    answer = lab.api("PUT", TRANSLATION_SETTINGS, json={"raw": json.dumps({"locale": locale})})
    assert answer.status_code == 204, answer.text


@pytest.fixture
def french(lab: Lab, browser: Browser) -> Iterator[Page]:
    """A tab on the lab in French (the lab's own language setting, put back afterwards)."""
    reset = lab.api("PUT", "api/sandbox/config", json={"backend": "subprocess"})
    assert reset.status_code == 200, reset.text
    set_locale(lab, "fr_FR")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        tab = context.new_page()
        tab.set_default_timeout(30_000)
        tab.goto(lab.page_url("lab"))
        yield tab
    finally:
        context.close()
        set_locale(lab, "en")


def test_the_panel_and_status_bar_are_in_french(lab: Lab, french: Page) -> None:
    page = french
    status = page.locator(".jp-gitpilot-status")
    expect(status).to_have_text("Bac à sable : Local", timeout=90_000)
    # The lab itself is French too (its language pack): the menu bar says so.
    expect(page.get_by_role("menuitem", name="Fichier", exact=True)).to_be_visible()

    agent = AgentSandbox(approval="ask", server=lab.server.url, token=lab.token)
    reply = agent.run_in_sandbox("python", "print('bonjour')", timeout_sec=30)
    assert reply.status == "approval_pending", reply.text
    # Plural forms come from the catalog: "1 plan en attente". Another client's plan shows at
    # the status bar's next look (every 30 s, refreshInterval's default): one interval and a margin.
    expect(status).to_have_text("Bac à sable : Local · 1 plan en attente", timeout=45_000)

    run_palette_command(page, "Bac à sable : plans en attente")
    panel = page.locator("#gitpilot-sandbox-pending")
    expect(panel.get_by_role("heading", name="Plans en attente")).to_be_visible()
    card = panel.locator(f'[data-plan-id="{reply.plan_id}"]')
    for text in ("Demandé par un agent", "Langage", "Réseau", "Durée maximale", "bloqué"):
        expect(card).to_contain_text(text)
    expect(card.get_by_role("button", name=re.compile("^Approuver"))).to_be_visible()
    screenshot(panel, "pending-plans-french-light")
    card.get_by_role("button", name=re.compile("^Refuser")).click()
    expect(card).to_contain_text("Refusé — il ne s'exécutera pas.")
    expect(status).to_have_text("Bac à sable : Local")
