"""The settings table of docs/admin/configuration.md is made from the settings' definition."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import ModuleType

import pytest

from gitpilot_jupyter.sandbox.settings import INT_RANGES, SandboxSettings

DOCS = Path(__file__).resolve().parents[2] / "docs"


def load_extension() -> ModuleType:
    """docs/_ext/settings_table.py, the Sphinx extension that renders the table."""
    pytest.importorskip("sphinx", reason="the docs tools (`make install`) are not installed")
    spec = importlib.util.spec_from_file_location(
        "settings_table", DOCS / "_ext" / "settings_table.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_has_a_row_with_its_default_and_bounds() -> None:
    rows = "\n".join(load_extension().settings_rst()).split("   * - ")[2:]
    assert len(rows) == len(fields(SandboxSettings))
    for row, spec in zip(rows, fields(SandboxSettings), strict=True):
        assert row.startswith(f"``{spec.name}``")
        assert f"``{json.dumps(spec.default)}``" in row
        assert " ".join(spec.metadata["help"].split()).split("`")[0] in row
        if spec.name in INT_RANGES:
            low, high = INT_RANGES[spec.name]
            assert f"{low} to {high}" in row


def test_a_setting_without_help_stops_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    extension = load_extension()

    @dataclass(frozen=True)
    class WithNewSetting(SandboxSettings):
        new_setting: int = field(default=1)

    monkeypatch.setattr(extension, "SandboxSettings", WithNewSetting)
    with pytest.raises(ValueError, match="new_setting has no help text"):
        extension.settings_rst()


def test_the_configuration_page_renders_the_table_and_types_none() -> None:
    page = (DOCS / "admin" / "configuration.md").read_text(encoding="utf-8")
    assert ".. sandbox-settings::" in page
    assert "| `backend` |" not in page and "| `timeout_sec` |" not in page
