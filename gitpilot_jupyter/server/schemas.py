"""Request bodies checked against the OpenAPI document, the one place their shape is written.

``rest-api.yml`` is OpenAPI 3.1, whose schemas are JSON Schema 2020-12, so the
handlers validate bodies with the very schemas the document publishes.

Two validators read the same schema. ``jsonschema`` is the reference: it decides
every body the fast one does not accept and words each 400. The fast one is the
schema compiled to plain Python by ``fastjsonschema`` (about 50 times quicker, so a
valid body costs a few microseconds instead of a tenth of a millisecond of every
request). It is only used for schemas made of keywords whose meaning it shares
with the reference, and it is never more lenient there (it is stricter on one
point: ``$`` does not match before a final newline), so a body either validator
would accept is answered exactly as before.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from importlib import resources
from typing import Any

import fastjsonschema
import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from ..sandbox.errors import InvalidRequest
from ..sandbox.text import check_all_text

#: Bodies larger than this are refused before parsing.
MAX_BODY_BYTES = 2 * 1024 * 1024

#: jsonschema keyword -> the stable ``code`` of the 400 answer.
_CODES = {
    "additionalProperties": "unknown_field",
    "required": "missing_field",
    "type": "invalid_type",
    "enum": "invalid_value",
}


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The parsed ``rest-api.yml`` shipped with the package."""
    text = resources.files(__package__).joinpath("rest-api.yml").read_text(encoding="utf-8")
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


@functools.cache
def _validator(schema_name: str) -> Draft202012Validator:
    components = openapi_document()["components"]
    if schema_name not in components["schemas"]:
        raise KeyError(f"no schema {schema_name!r} in rest-api.yml")
    schema = {"$ref": f"#/components/schemas/{schema_name}", "components": components}
    return Draft202012Validator(schema)


#: The keywords a schema may use to get a compiled check: those whose meaning
#: ``fastjsonschema`` (draft 7) and JSON Schema 2020-12 share, and annotations.
_COMPILED_KEYWORDS = frozenset(
    {
        "type",
        "properties",
        "additionalProperties",
        "required",
        "enum",
        "items",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "pattern",
        "description",
        "default",
        "title",
        "examples",
    }
)

#: A compiled schema: returns when the value is valid, raises when it may not be.
FastCheck = Callable[[Any], object]


def _inline(node: Any, components: dict[str, Any], depth: int = 0) -> Any:
    """``node`` with every ``$ref`` to a component replaced by that component.

    Raises ``ValueError`` for what a compiled check does not take: another keyword
    beside a ``$ref``, an unknown keyword, an ``enum`` of anything but strings (where
    ``True == 1`` would blur), or references nested too deep (a cycle).
    """
    if depth > 32:
        raise ValueError("references nested too deep")
    if not isinstance(node, dict):
        raise ValueError(f"not a schema: {node!r}")
    if "$ref" in node:
        if set(node) - {"$ref", "description"}:
            raise ValueError("a $ref with other keywords")
        ref = str(node["$ref"])
        prefix = "#/components/schemas/"
        if not ref.startswith(prefix) or ref[len(prefix) :] not in components:
            raise ValueError(f"unknown reference {ref}")
        return _inline(components[ref[len(prefix) :]], components, depth + 1)
    unknown = set(node) - _COMPILED_KEYWORDS
    if unknown:
        raise ValueError(f"keywords {sorted(unknown)}")
    if "enum" in node and not all(isinstance(v, str) for v in node["enum"]):
        raise ValueError("an enum of non-strings")
    out = dict(node)
    if "properties" in node:
        out["properties"] = {
            key: _inline(value, components, depth + 1) for key, value in node["properties"].items()
        }
    if "items" in node:
        out["items"] = _inline(node["items"], components, depth + 1)  # one schema, no tuples
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _inline(node["additionalProperties"], components, depth + 1)
    return out


@functools.cache
def _compiled(schema_name: str) -> FastCheck | None:
    """``schema_name`` compiled to Python, or None where only the reference may judge."""
    components = openapi_document()["components"]["schemas"]
    try:
        schema = _inline(components[schema_name], components)
    except ValueError:
        return None
    # No defaults written into the body, no format assertions: neither is the reference's.
    check: FastCheck = fastjsonschema.compile(schema, use_default=False, use_formats=False)
    return check


def prepare() -> None:
    """Load ``rest-api.yml`` and make every schema's validators now, not on first use.

    The server calls it in a thread when it starts: else the first request that
    carries a body pays for parsing the whole document (about 60 ms before the
    first plan on a 2-core machine) and for compiling its schema.
    """
    for name in openapi_document()["components"]["schemas"]:
        _validator(name).is_valid({})  # resolves the schema's reference once
        _compiled(name)


def _describe(error: ValidationError) -> InvalidRequest:
    """A 400 with a message naming the field and a code naming the rule."""
    code = _CODES.get(str(error.validator), "invalid_body")
    where = ".".join(str(p) for p in error.absolute_path)
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        allowed = sorted(error.schema.get("properties", {}))
        message = f"unknown field(s) {extra}; expected some of {allowed}"
    elif error.validator == "required":
        message = error.message.replace("is a required property", "is required")
    elif error.validator == "type":
        expected = error.validator_value
        kinds = " or ".join(expected) if isinstance(expected, list) else str(expected)
        message = f"{where or 'the body'} must be of type {kinds}"
    elif error.validator == "enum":
        message = f"{where} must be one of {error.validator_value}, got {error.instance!r}"
    else:
        message = f"{where or 'the body'}: {error.message}"
    return InvalidRequest(message, code=code)


def parse_body(raw: bytes, schema_name: str) -> dict[str, Any]:
    """Decode a JSON request body and check it against ``schema_name``.

    An empty body counts as ``{}``. Raises :class:`InvalidRequest` (400) with
    ``body_too_large``, ``malformed_json``, ``invalid_body``, ``invalid_unicode`` (a lone
    surrogate anywhere) or a field code.
    """
    if len(raw) > MAX_BODY_BYTES:
        raise InvalidRequest(
            f"the request body is larger than {MAX_BODY_BYTES} bytes", code="body_too_large"
        )
    # Only JSON's own whitespace makes a body empty: bytes.strip() would also eat \x0b and \x0c.
    if raw.strip(b" \t\r\n"):
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise InvalidRequest(
                f"the request body is not valid JSON: {exc}", code="malformed_json"
            ) from None
    else:
        body = {}
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_body")
    check_all_text(body)
    fast = _compiled(schema_name)
    if fast is not None:
        try:
            fast(body)
        except fastjsonschema.JsonSchemaException:
            pass  # the reference decides (the fast check is stricter) and words the answer
        else:
            return body
    # The shallowest error first: an unknown field says more than a nested type.
    errors = sorted(
        _validator(schema_name).iter_errors(body),
        key=lambda e: (len(e.path), [str(p) for p in e.path]),
    )
    if errors:
        raise _describe(errors[0])
    return body
