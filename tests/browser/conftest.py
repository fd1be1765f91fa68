"""Browser end-to-end fixtures: one real ``jupyter lab`` and one chromium per module.

Run these in their own pytest process (``make test-browser``): Playwright's sync API
must not share a process with pytest-jupyter's event loop fixtures.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support.system import require_system

from .lab import BUILT_EXTENSION, Lab, start_lab
from .ui import ARTIFACTS

# What a user waits for (a tab to open, a kernel to start) takes longer than Playwright's
# 5 s on a loaded 2-core machine (CI's): every expectation may wait this long; one that
# holds answers at once, so a passing run is no slower.
expect.set_options(timeout=30_000)

CHROMIUM = Path("/usr/bin/chromium")
DEFAULT_RUNNER = "http://localhost:8765"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@pytest.fixture(autouse=True)
def jp_asyncio_loop() -> Iterator[None]:
    """Replace pytest-jupyter's loop fixture here: it would close Playwright's running loop."""
    yield None


@pytest.fixture(autouse=True)
def jp_server_cleanup() -> Iterator[None]:
    """Replace pytest-jupyter's server cleanup: these tests start no in-process server."""
    yield None


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """A JupyterLab with the sandbox extension, its own settings and a demo root folder."""
    require_system("chromium", CHROMIUM.exists(), "apt-get install -y chromium")
    if not (BUILT_EXTENSION / "package.json").exists():
        pytest.fail("the lab extension is not built: pip install -e . (or make install)")
    server = start_lab(tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser(lab: Lab) -> Iterator[Browser]:
    """Debian's chromium driven by Playwright (never a downloaded browser)."""
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(lab: Lab, browser: Browser, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A fresh tab on the lab, with the sandbox reset to Local and no token."""
    defaults = {
        "backend": "subprocess",
        "matrixlab_token": "",
        "matrixlab_url": DEFAULT_RUNNER,
        "timeout_sec": 120,
    }
    reset = lab.api("PUT", "api/sandbox/config", json=defaults)
    assert reset.status_code == 200, reset.text
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    tab = context.new_page()
    tab.set_default_timeout(30_000)
    tab.goto(lab.page_url("lab"))
    # "Sandbox: Local", or "Sandbox: Local — error" on a lab whose host refuses runs.
    status = tab.locator(".jp-gitpilot-status")
    expect(status).to_have_text(re.compile(r"^Sandbox: Local"), timeout=90_000)
    yield tab
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    name = re.sub(r"[^\w.-]+", "_", request.node.name)
    tab.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    context.close()
