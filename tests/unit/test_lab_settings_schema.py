"""The Settings Editor's Sandbox page shows the server's settings: its schema agrees with them."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from gitpilot_jupyter.sandbox.settings import BACKENDS, MAX_TIMEOUT_SEC, SandboxSettings

SCHEMA = Path(__file__).resolve().parents[2] / "labextension" / "schema" / "plugin.json"


def test_the_lab_page_offers_each_server_setting_with_the_servers_default() -> None:
    properties = json.loads(SCHEMA.read_text(encoding="utf-8"))["properties"]
    defaults = {f.name: f.default for f in fields(SandboxSettings)}
    shown = {"backend", "timeout_sec", "allow_network", "matrixlab_url", "matrixlab_image"}
    for name in shown:
        assert properties[name]["default"] == defaults[name], name
    # The token is never written to a lab settings file; the limits the UI does not edit stay out.
    assert set(properties) - {"refreshInterval"} == shown
    assert sorted(choice["const"] for choice in properties["backend"]["oneOf"]) == sorted(BACKENDS)
    assert properties["timeout_sec"]["maximum"] == MAX_TIMEOUT_SEC
