"""Bad input is a 400 with a code, never a 500, a traceback or an HTML page."""

from __future__ import annotations

import json

import pytest

from tests.support.live_server import free_port

from .helpers import Answer, Api, plan_and_approve

PLAN = "api/sandbox/plan"
RUN = "api/sandbox/run"


def assert_error(answer: Answer, status: int, code: str) -> None:
    """The JSON error body with the expected status and code, and nothing internal in it."""
    assert answer.code == status, answer.text
    body = answer.body
    assert set(body) == {"message", "reason", "code"}
    assert body["code"] == code, body
    assert body["message"] and "Traceback" not in body["message"]
    assert answer.headers["Content-Type"].startswith("application/json")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"language": "cobol", "code": "x"}, "unknown_language"),
        ({"language": "python", "code": "x", "backend": "docker"}, "unknown_backend"),
        ({"language": "python", "code": "x", "timeout_sec": 0}, "invalid_timeout"),
        ({"language": "python", "code": "x", "timeout_sec": 601}, "invalid_timeout"),
        ({"language": "python", "code": "   \n"}, "empty_code"),
        ({"language": "python"}, "missing_field"),
        ({"code": "print(1)"}, "missing_field"),
        ({"language": "python", "code": 5}, "invalid_type"),
        ({"language": "python", "code": "x", "timeout_sec": "10"}, "invalid_type"),
        ({"language": "python", "code": "x", "timeout_sec": 1.5}, "invalid_type"),
        ({"language": "python", "code": "x", "allow_network": "yes"}, "invalid_type"),
        ({"language": "python", "code": "x", "colour": "red"}, "unknown_field"),
        ({"language": "python", "code": "x", "source": "email"}, "invalid_value"),
        ({"language": "python", "code": "x", "file": "a.py"}, "invalid_request"),
    ],
)
async def test_plan_refuses_bad_input(api: Api, body: dict[str, object], code: str) -> None:
    assert_error(await api("POST", PLAN, body), 400, code)


async def test_unknown_backend_message_lists_the_accepted_ones(api: Api) -> None:
    answer = await api("POST", PLAN, {"language": "python", "code": "x", "backend": "x"})
    assert answer.body["message"] == (
        "unknown sandbox backend 'x'; expected one of ['matrixlab', 'off', 'subprocess']"
    )


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"{not json", "malformed_json"),
        (b"\xff\xfe\x00", "malformed_json"),
        (b"\x0b", "malformed_json"),  # not JSON whitespace, though bytes.strip() eats it
        (b"[1, 2]", "invalid_body"),
        (b'"just a string"', "invalid_body"),
        (b"null", "invalid_body"),
    ],
)
@pytest.mark.parametrize("path", [PLAN, RUN, "api/sandbox/approve", "api/sandbox/config"])
async def test_malformed_bodies(api: Api, path: str, raw: bytes, code: str) -> None:
    method = "PUT" if path.endswith("config") else "POST"
    assert_error(await api(method, path, raw=raw), 400, code)


async def test_huge_body_is_refused(api: Api) -> None:
    raw = json.dumps({"language": "python", "code": "#" * (2 * 1024 * 1024 + 10)}).encode()
    assert_error(await api("POST", PLAN, raw=raw), 400, "body_too_large")
    assert_error(await api("POST", RUN, raw=raw), 400, "body_too_large")


async def test_run_checks_in_contract_order(api: Api) -> None:
    # Shape first: a malformed body is a 400 even without an approval.
    assert_error(await api("POST", RUN, {"language": 1, "code": "x"}), 400, "invalid_type")
    # Then approval: an unknown language without a token is a 403, not a 400.
    assert_error(
        await api("POST", RUN, {"language": "cobol", "code": "x"}), 403, "approval_required"
    )


@pytest.mark.parametrize("jp_server_config", [{"require_approval": False}], indirect=True)
@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"language": "cobol", "code": "x"}, "unknown_language"),
        ({"language": "python", "code": ""}, "empty_code"),
        ({"language": "python", "code": "x", "timeout_sec": 9999}, "invalid_timeout"),
        ({"language": "bash", "code": "rm -rf /"}, "destructive_pattern"),
        ({"language": "python", "code": "x", "backend": "nope"}, "unknown_backend"),
    ],
)
async def test_run_refusals_after_the_approval_gate(
    api: Api, body: dict[str, object], code: str
) -> None:
    assert_error(await api("POST", RUN, body), 400, code)


async def test_destructive_pattern_is_named(api: Api) -> None:
    plan, token = await plan_and_approve(api, language="bash", code="rm -rf /tmp/x && echo ok")
    assert plan["blocked"] is False
    answer = await api(
        "POST",
        RUN,
        {"language": "bash", "code": "rm -rf /tmp/x && echo ok", "approval_token": token},
    )
    assert answer.code == 200 and answer.body["stdout"] == "ok\n"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"plan_id": 7}, "invalid_type"),
        ({}, "missing_field"),
        ({"plan_id": "plan_0000000000000000", "extra": 1}, "unknown_field"),
    ],
)
async def test_approve_refuses_bad_input(api: Api, body: dict[str, object], code: str) -> None:
    assert_error(await api("POST", "api/sandbox/approve", body), 400, code)


async def test_unknown_route_and_method_answer_json(api: Api) -> None:
    answer = await api("DELETE", "api/sandbox/config", validate=False)
    assert answer.code == 405
    assert answer.body["code"] == "method_not_allowed"
    answer = await api("GET", "api/sandbox/plan", validate=False)
    assert answer.code == 405 and answer.body["code"] == "method_not_allowed"


async def test_a_percent_sign_in_a_message_is_not_a_format_directive(api: Api) -> None:
    answer = await api("POST", PLAN, {"language": "%s %d 100%", "code": "x"})
    assert_error(answer, 400, "unknown_language")
    assert "%s %d 100%" in answer.body["message"]


@pytest.mark.parametrize("jp_server_config", [{"require_approval": False}], indirect=True)
async def test_unreachable_runner_is_503_even_when_streaming(api: Api) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    await api("PUT", "api/sandbox/config", {"backend": "matrixlab", "matrixlab_url": url})
    body = {"language": "python", "code": "print(1)"}
    for headers in ({}, {"Accept": "application/x-ndjson"}):
        answer = await api("POST", RUN, body, headers=headers)
        assert_error(answer, 503, "backend_unreachable")
    status = await api("GET", "api/sandbox/status")
    assert status.code == 200 and status.body["ok"] is False and status.body["error"]
