"""Request bodies: the compiled check answers every body exactly as the reference validator.

The server checks a body first with its schema compiled to Python and hands
anything that check refuses to ``jsonschema``, which words the 400. These tests
let hypothesis search for a body the two would answer differently: a body let
through that the reference refuses, a default written into it, another error.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitpilot_jupyter.sandbox.errors import InvalidRequest
from gitpilot_jupyter.server import schemas

SCHEMAS = schemas.openapi_document()["components"]["schemas"]


def bodies_read_by_handlers() -> list[str]:
    """The schemas the handlers check bodies against (``self.body("...")``)."""
    server = Path(schemas.__file__).parent
    return sorted(
        {
            name
            for path in server.glob("*.py")
            for name in re.findall(r"self\.body\(\"(\w+)\"\)", path.read_text(encoding="utf-8"))
        }
    )


READ = bodies_read_by_handlers()

#: Values that sit on the edges of the request schemas' rules.
EDGES = st.sampled_from(
    [
        "python",
        "py",
        "bash",
        "javascript",
        "subprocess",
        "matrixlab",
        "off",
        "api",
        "cell",
        "agent",
        "run_0123456789abcdef",
        "run_0123456789abcdef\n",
        "PATH",
        "A\n",
        "1ABC",
        "",
        0,
        1,
        600,
        601,
        1.0,
        -1,
        True,
        False,
        None,
        math.nan,
        math.inf,
    ]
)
LEAVES = EDGES | st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
VALUES = st.recursive(
    LEAVES,
    lambda inner: (
        st.lists(inner, max_size=70) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=70,
)


def outcome(raw: bytes, schema_name: str) -> tuple[Any, ...]:
    """What ``parse_body`` answers: the body it returns, or the 400's code and message."""
    try:
        return ("ok", schemas.parse_body(raw, schema_name))
    except InvalidRequest as exc:
        return ("refused", exc.code, exc.message)


def reference(raw: bytes, schema_name: str) -> tuple[Any, ...]:
    """The same answer with the reference validator alone."""
    with mock.patch.object(schemas, "_compiled", lambda name: None):
        return outcome(raw, schema_name)


def same(a: Any, b: Any) -> bool:
    """Equal, NaN included (a body may carry NaN: Python's JSON reads it)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("schema_name", READ)
def test_every_body_a_handler_reads_gets_the_compiled_check(schema_name: str) -> None:
    # A keyword the compiled check does not share with the reference turns it off
    # for that schema (answers stay right, but every request pays the slow check).
    assert schemas._compiled(schema_name) is not None


@pytest.mark.parametrize("schema_name", READ)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_compiled_check_answers_as_the_reference(schema_name: str, data: st.DataObject) -> None:
    fields = list(SCHEMAS[schema_name].get("properties", {}))
    keys = st.sampled_from([*fields, "unknown"]) if fields else st.just("unknown")
    body = data.draw(st.dictionaries(keys, VALUES, max_size=len(fields) + 1))
    raw = json.dumps(body).encode()
    assert same(outcome(raw, schema_name), reference(raw, schema_name))


@pytest.mark.parametrize(
    ("schema_name", "body"),
    [
        ("PlanRequest", {"language": "python", "code": "print(1)"}),  # ``source`` has a default
        ("PlanRequest", {"language": "python", "code": "x", "timeout_sec": 1.0}),
        ("PlanRequest", {"language": "python", "code": "x", "timeout_sec": True}),
        ("PlanRequest", {"language": "python", "code": "x", "env": ["A\n"]}),
        ("PlanRequest", {"language": "python", "code": "x", "env": ["A"] * 64}),
        ("PlanRequest", {"language": "python", "code": "x", "env": ["A"] * 65}),
        ("RunRequest", {"approval_token": "t", "run_id": "run_0123456789abcdef\n"}),
        ("ApproveRequest", {"plan_id": 1}),
        ("ApproveRequest", {}),
    ],
)
def test_edge_bodies_are_answered_as_the_reference_answers_them(
    schema_name: str, body: dict[str, Any]
) -> None:
    raw = json.dumps(body).encode()
    assert same(outcome(raw, schema_name), reference(raw, schema_name))
    if outcome(raw, schema_name)[0] == "ok":
        assert outcome(raw, schema_name)[1] == body  # nothing added (no default written in)
