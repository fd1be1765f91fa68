"""Bad input: schemathesis fuzzes every operation of the shipped OpenAPI document.

Valid and invalid requests (positive and negative generation) go to a real
server; each answer must be no 5xx and must match the document (status code,
content type, body schema), invalid bodies must be refused. The last test
checks that at least 1,000 requests were made.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

from gitpilot_jupyter.server.schemas import openapi_document

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


def test_at_least_a_thousand_requests_were_fuzzed() -> None:
    if not SENT:
        pytest.skip("counts the requests of the fuzz tests above; run it with them")
    total = sum(SENT.values())
    print(f"fuzzed requests: {total} over {len(SENT)} operations: {dict(SENT)}")
    assert total >= MIN_REQUESTS, dict(SENT)
