"""``.. sandbox-settings::``: the fields of ``settings.json`` as a table, from their definition.

Each row comes from a field of :class:`gitpilot_jupyter.sandbox.settings.SandboxSettings`: its
name, type and default, the help text in its metadata, and the rule the validation applies (the
backends, the bounds of :data:`~gitpilot_jupyter.sandbox.settings.INT_RANGES`). A new setting shows
up here by itself; one without a help text fails the build.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, fields
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.nodes import nested_parse_with_titles

from gitpilot_jupyter.sandbox import settings as settings_module
from gitpilot_jupyter.sandbox.settings import BACKENDS, INT_RANGES, SandboxSettings

#: The JSON type a settings field holds, by its Python annotation.
_JSON_TYPES = {"str": "string", "int": "integer", "bool": "boolean"}


def _literal(text: str) -> str:
    """Markdown-style `code` in a help text as reST ``code`` (``**bold**`` is the same in both)."""
    return re.sub(r"`([^`]+)`", r"``\1``", text)


def _rule(name: str, kind: str) -> str:
    """What the validation accepts for the field, in words."""
    if name == "backend":
        return "one of " + ", ".join(f"``{backend}``" for backend in BACKENDS)
    if name in INT_RANGES:
        low, high = INT_RANGES[name]
        return f"{low} to {high}"
    if kind == "bool":
        return "``true`` or ``false``"
    return ""


def settings_rst() -> list[str]:
    """The reST list-table of every settings field, in the definition's order."""
    lines = [
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 18 9 16 14 43",
        "",
        "   * - field",
        "     - type",
        "     - default",
        "     - accepted",
        "     - what",
    ]
    for spec in fields(SandboxSettings):
        help_text = spec.metadata.get("help")
        if not help_text:
            raise ValueError(
                f"SandboxSettings.{spec.name} has no help text (field(metadata={{'help': ...}})): "
                "the settings table of docs/admin/configuration.md needs one"
            )
        if spec.default is MISSING:
            raise ValueError(f"SandboxSettings.{spec.name} has no default")
        kind = str(spec.type)
        lines += [
            f"   * - ``{spec.name}``",
            f"     - {_JSON_TYPES.get(kind, kind)}",
            f"     - ``{json.dumps(spec.default)}``",
            f"     - {_rule(spec.name, kind)}",
            f"     - {_literal(' '.join(str(help_text).split()))}",
        ]
    lines.append("")
    return lines


class SandboxSettingsTable(Directive):
    """Render the settings table (no argument, no content)."""

    has_content = False

    def run(self) -> list[Any]:
        env = self.state.document.settings.env
        env.note_dependency(settings_module.__file__)
        try:
            lines = settings_rst()
        except ValueError as exc:
            raise self.error(str(exc)) from None
        section = nodes.section()
        section.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source="SandboxSettings"), section)
        return list(section.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("sandbox-settings", SandboxSettingsTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
