"""Bad input: schemathesis fuzzes every operation of the shipped OpenAPI document.

Valid and invalid requests (positive and negative generation) go to a real
server; each answer must be no 5xx and must match the document (status code,
content type, body schema), invalid bodies must be refused. Beyond what a schema
can generate, every body field also gets text full of control, format and bidi
characters and lone surrogates (``"\\ud800"``), and every body endpoint an
oversized body. The last test checks that at least 1,000 requests were made.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import httpx
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from gitpilot_jupyter.sandbox.text import lone_surrogate
from gitpilot_jupyter.server.base import UNAUTHENTICATED_BODY_BYTES
from gitpilot_jupyter.server.schemas import MAX_BODY_BYTES, openapi_document

from .conftest import Live

SCHEMA = schemathesis.openapi.from_dict(openapi_document())
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
MIN_REQUESTS = 1_000
#: Examples per operation and generation mode; operations with a small input space give fewer.
EXAMPLES = 45
SENT: Counter[str] = Counter()
#: "A schema-valid request must be accepted" cannot hold for rules a schema cannot say
#: (an empty snippet, a destructive pattern, an unknown plan id): those answer a documented 4xx.
LENIENT = [positive_data_acceptance]


def _blank(body: Any) -> bool:
    """An empty or JSON-whitespace body: documented to count as ``{}`` (rest-api.yml, info)."""
    if isinstance(body, bytes):
        body = body.decode("latin-1")
    return isinstance(body, str) and not body.strip(" \t\r\n")


@pytest.fixture(scope="module")
def session(live: Live) -> Any:
    """A requests session carrying the server's token (schemathesis calls through requests)."""
    with requests.Session() as http:
        http.headers["Authorization"] = f"token {live.server.token}"
        yield http


#: (operation, mode): invalid input only where there is input (a body or a query).
CASES = [
    pytest.param(op, mode, id=f"{op.method.upper()} {op.path} {mode.value}")
    for op in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or list(op.body) or list(op.query)
]


@pytest.mark.parametrize(("operation", "mode"), CASES)
def test_fuzzed_requests_get_documented_answers(
    live: Live, session: Any, operation: Any, mode: GenerationMode
) -> None:
    label = f"{operation.method.upper()} {operation.path}"

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: Any) -> None:
        SENT[label] += 1
        response = case.call(base_url=live.server.url, session=session, timeout=60)
        live.responses.append(f"{response.headers}\n{response.text}")  # for the secret sweep
        assert response.status_code < 500, (label, response.status_code, response.text[:500])
        lenient = LENIENT + ([negative_data_rejection] if _blank(case.body) else [])
        case.validate_response(response, excluded_checks=lenient)

    fuzz()
    # The server still serves a plain request afterwards.
    assert live.http.get("/api/sandbox/status").status_code == 200


def _body_operations() -> list[tuple[str, str, list[str]]]:
    """(method, path, body field names) of every operation that takes a JSON body."""
    doc = openapi_document()
    found = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            content = (op.get("requestBody") or {}).get("content", {})
            if method not in ("post", "put") or "application/json" not in content:
                continue
            ref = content["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
            fields = sorted(doc["components"]["schemas"][ref].get("properties", {}))
            found.append((method.upper(), path, fields or ["x"]))
    return found


BODY_OPERATIONS = _body_operations()
#: Text a terminal, a header or an encoder chokes on: controls, bidi, separators, surrogates.
NASTY = st.text(
    alphabet=st.characters(categories=("Cc", "Cf", "Zl", "Zp", "Cs")), min_size=1, max_size=12
)
MIXED = st.lists(st.one_of(NASTY, st.text(max_size=8)), min_size=1, max_size=4).map("".join)


@pytest.mark.parametrize(
    ("method", "path", "fields"), BODY_OPERATIONS, ids=[f"{m} {p}" for m, p, _ in BODY_OPERATIONS]
)
def test_control_characters_and_lone_surrogates_get_a_400_never_a_500(
    live: Live, session: Any, method: str, path: str, fields: list[str]
) -> None:
    @settings(
        max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(field=st.sampled_from(fields), value=MIXED, as_key=st.booleans())
    def fuzz(field: str, value: str, as_key: bool) -> None:
        SENT[f"{method} {path}"] += 1
        body = {value: "x"} if as_key else {field: value}
        raw = json.dumps(body).encode()  # ensure_ascii: a surrogate travels as "\\udXXX"
        response = session.request(
            method, live.server.url + path, data=raw, headers={"Content-Type": "application/json"}
        )
        live.responses.append(f"{response.headers}\n{response.text}")
        assert response.status_code < 500, (path, body, response.text[:300])
        answer = response.json()
        # As the server decodes it: an escaped surrogate *pair* is one valid character.
        sent = next(iter(json.loads(raw).items()))
        if any(lone_surrogate(text) is not None for text in sent):
            assert (response.status_code, answer["code"]) == (400, "invalid_unicode"), body
        elif response.status_code >= 400:
            assert answer["code"] and answer["message"], answer

    fuzz()


@pytest.mark.parametrize(
    ("method", "path"),
    [(m, p) for m, p, _ in BODY_OPERATIONS],
    ids=[p for _, p, _ in BODY_OPERATIONS],
)
def test_oversized_bodies_are_refused_with_a_code(live: Live, method: str, path: str) -> None:
    SENT[f"{method} {path}"] += 2
    big = json.dumps({"code": "#" * (MAX_BODY_BYTES + 1)}).encode()
    headers = {"Content-Type": "application/json", "Expect": "100-continue"}
    with httpx.Client(base_url=live.server.url, timeout=60) as http:
        auth = {"Authorization": f"token {live.server.token}"}
        try:
            answer = http.request(method, path, content=big, headers={**headers, **auth})
        except httpx.TransportError:
            pytest.fail(f"{path}: the connection was dropped instead of answered")
        assert (answer.status_code, answer.json()["code"]) == (400, "body_too_large")
        small_enough = b" " * (UNAUTHENTICATED_BODY_BYTES + 1)
        anonymous = http.request(method, path, content=small_enough, headers=headers)
        assert anonymous.status_code == 403, anonymous.text


def test_at_least_a_thousand_requests_were_fuzzed() -> None:
    if not SENT:
        pytest.skip("counts the requests of the fuzz tests above; run it with them")
    total = sum(SENT.values())
    print(f"fuzzed requests: {total} over {len(SENT)} operations: {dict(SENT)}")
    assert total >= MIN_REQUESTS, dict(SENT)
