"""The lab extension's TypeScript types say what rest-api.yml says.

Each interface in ``labextension/src/types.ts`` is checked against its schema:
every field it declares exists in the schema, a field the TypeScript treats as
always present is one the server always sends (required), and a string union is
the schema's enum. A field the server never sends (as ``IPlan.stdin`` once was)
or a renamed one fails here, not in a browser.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.server.schemas import openapi_document

TYPES_TS = Path(__file__).resolve().parents[2] / "labextension" / "src" / "types.ts"

#: TypeScript interface -> rest-api.yml schema.
PAIRS = {
    "IPlanCheck": "Check",
    "IPlanWarning": "Warning",
    "IPlan": "Plan",
    "IRunningPlan": "RunningPlan",
    "IApproval": "Approval",
    "IRunRequest": "RunRequest",
    "IRunResult": "RunResult",
    "IDisplayOutput": "DisplayOutput",
    "IMaskedSettings": "Settings",
    "IStatus": "Status",
    "IConnectionReport": "MatrixlabTest",
    "ILifecycleStatus": "LifecycleStatus",
    "ILifecycleStep": "Step",
    "ILifecycleResult": "LifecycleResult",
}

_FIELD = re.compile(r"^\s*(\w+)(\?)?:\s*(.+?);\s*$")


def interfaces() -> dict[str, dict[str, tuple[bool, str]]]:
    """``{interface: {field: (optional, type text)}}`` parsed from types.ts."""
    found: dict[str, dict[str, tuple[bool, str]]] = {}
    for match in re.finditer(
        r"export interface (\w+) \{(.*?)\n\}", TYPES_TS.read_text(encoding="utf-8"), re.S
    ):
        fields = {}
        for line in match.group(2).splitlines():
            field = _FIELD.match(line)
            if field:
                fields[field.group(1)] = (bool(field.group(2)), field.group(3))
        found[match.group(1)] = fields
    return found


def schema(name: str) -> dict[str, Any]:
    document: dict[str, Any] = openapi_document()
    found: dict[str, Any] = document["components"]["schemas"][name]
    return found


def test_every_answer_interface_has_a_schema() -> None:
    assert set(PAIRS) <= set(interfaces()), "types.ts lost an interface this test checks"


@pytest.mark.parametrize(("interface", "schema_name"), sorted(PAIRS.items()))
def test_the_interface_matches_its_schema(interface: str, schema_name: str) -> None:
    fields = interfaces()[interface]
    target = schema(schema_name)
    properties, required = target.get("properties", {}), set(target.get("required", []))
    unknown = set(fields) - set(properties)
    assert not unknown, f"{interface} declares fields {schema_name} does not have: {unknown}"
    request = schema_name.endswith("Request")
    for field, (optional, ts_type) in fields.items():
        if not request and not optional:
            assert field in required, (
                f"{interface}.{field} is typed as always present; "
                f"rest-api.yml does not require it in {schema_name}"
            )
        literals = set(re.findall(r"'([^']+)'", ts_type))
        enum = properties[field].get("enum")
        if literals and enum:
            assert literals == set(enum), f"{interface}.{field}: {literals} != {enum}"
