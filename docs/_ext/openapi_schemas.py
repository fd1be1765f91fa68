"""``.. openapi-schemas:: PATH``: the ``components/schemas`` of an OpenAPI document as tables.

sphinxcontrib-openapi renders the paths; the shapes of the answers (the result envelope, the
plan, the status) live under ``components/schemas`` and are rendered here, one table a schema,
from the same file, so the reference cannot drift from the document the tests hold the server to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util.nodes import nested_parse_with_titles


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _type_of(schema: dict[str, Any]) -> str:
    """A short reST rendering of a property's type."""
    if "$ref" in schema:
        name = _ref_name(schema["$ref"])
        return f"`{name} <#openapi-schema-{name.lower()}>`__"
    if "enum" in schema:
        return " | ".join(f"``{value}``" for value in schema["enum"])
    kind = schema.get("type")
    if kind is None:
        for key in ("oneOf", "anyOf"):
            if key in schema:
                return " | ".join(_type_of(option) for option in schema[key])
        return "any"
    kinds = kind if isinstance(kind, list) else [kind]
    rendered = []
    for one in kinds:
        if one == "array" and "items" in schema:
            rendered.append(f"array of {_type_of(schema['items'])}")
        else:
            rendered.append(str(one))
    return " | ".join(rendered)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def schema_rst(name: str, schema: dict[str, Any]) -> list[str]:
    """The reST of one schema: a labelled heading, its description, its fields."""
    lines = [f".. _openapi-schema-{name.lower()}:", "", name, "-" * len(name), ""]
    if schema.get("description"):
        lines += [_one_line(schema["description"]), ""]
    properties: dict[str, Any] = schema.get("properties") or {}
    if not properties:
        lines += [f"Type: {_type_of(schema)}.", ""]
        return lines
    required = set(schema.get("required") or [])
    lines += [
        ".. list-table::",
        "   :header-rows: 1",
        "   :widths: 20 25 10 45",
        "",
        "   * - field",
        "     - type",
        "     - required",
        "     - description",
    ]
    for field, spec in properties.items():
        spec = spec or {}
        extra = []
        if "default" in spec:
            extra.append(f"Default ``{spec['default']!r}``.")
        description = " ".join([_one_line(spec.get("description", "")), *extra]).strip()
        lines += [
            f"   * - ``{field}``",
            f"     - {_type_of(spec)}",
            f"     - {'yes' if field in required else ''}",
            f"     - {description}",
        ]
    if schema.get("additionalProperties") is False:
        lines += ["", "Other fields are refused."]
    lines.append("")
    return lines


class OpenAPISchemas(Directive):
    """Render every schema of ``components/schemas`` of the document at the given path."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[Any]:
        env = self.state.document.settings.env
        source = Path(env.doc2path(env.docname)).parent / self.arguments[0]
        env.note_dependency(str(source.resolve()))
        document = yaml.safe_load(source.read_text(encoding="utf-8"))
        lines: list[str] = []
        for name, schema in (document.get("components", {}).get("schemas") or {}).items():
            lines += schema_rst(name, schema)
        section = nodes.section()
        section.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=str(source)), section)
        return list(section.children)


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("openapi-schemas", OpenAPISchemas)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
