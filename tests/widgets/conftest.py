"""Widgets are tested headless: ``Button.click()`` and ``ipw.link`` work without a kernel."""

from __future__ import annotations

import pytest

from gitpilot_jupyter.client.local import LocalClient


@pytest.fixture
def client() -> LocalClient:
    """The in-process client (real SandboxService, private settings folder)."""
    return LocalClient()
