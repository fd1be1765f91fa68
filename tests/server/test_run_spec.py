"""One definition of a run: plan and run build the same spec; a run by its token alone.

Regression tests for the bug of deriving a run twice (the timeout clamped at plan
time and not at run time) and for each "plan -> run arguments" mapping that went.
"""

from __future__ import annotations

from typing import Any

import pytest

from .helpers import NDJSON, Api, plan_and_approve


@pytest.mark.parametrize("jp_server_config", [{"max_timeout_sec": 60}], indirect=True)
async def test_a_clamped_default_timeout_is_the_same_at_plan_and_run(api: Api) -> None:
    # The saved timeout is the default 120; the server allows at most 60.
    status = await api("GET", "api/sandbox/config")
    assert status.body["timeout_sec"] == 120
    body = {"language": "python", "code": "print('clamped')"}
    plan, token = await plan_and_approve(api, **body)
    assert plan["timeout_sec"] == 60
    # The long form, the same body as the plan's: it must match the approved plan.
    answer = await api("POST", "api/sandbox/run", {**body, "approval_token": token})
    assert answer.code == 200, answer.text
    assert answer.body["stdout"] == "clamped\n" and answer.body["plan_id"] == plan["plan_id"]


async def test_the_token_alone_runs_the_approved_plan(api: Api) -> None:
    plan, token = await plan_and_approve(
        api,
        language="py",
        code="print(input().upper())",
        stdin="from the plan\n",
        timeout_sec=7,
        backend="subprocess",
        allow_network=False,
    )
    answer = await api("POST", "api/sandbox/run", {"approval_token": token})
    assert answer.code == 200, answer.text
    result = answer.body
    # stdin, language, backend: all from the approved plan, nothing sent again.
    assert result["stdout"] == "FROM THE PLAN\n"
    assert (result["language"], result["backend"]) == ("python", "subprocess")
    assert result["plan_id"] == plan["plan_id"]
    again = await api("POST", "api/sandbox/run", {"approval_token": token})
    assert (again.code, again.body["code"]) == (403, "approval_used")


async def test_the_token_alone_streams_as_ndjson(api: Api) -> None:
    _plan, token = await plan_and_approve(api, language="bash", code="echo one; echo two >&2")
    answer = await api(
        "POST", "api/sandbox/run", {"approval_token": token}, headers={"Accept": NDJSON}
    )
    assert answer.code == 200 and isinstance(answer.body, list)
    kinds = [line["type"] for line in answer.body]
    assert kinds[-1] == "result" and {"stdout", "stderr"} <= set(kinds)
    assert answer.body[-1]["exit_code"] == 0


async def test_no_token_and_no_code_is_refused(api: Api) -> None:
    answer = await api("POST", "api/sandbox/run", {})
    assert (answer.code, answer.body["code"]) == (403, "approval_required")
    unknown = await api("POST", "api/sandbox/run", {"approval_token": "x" * 43})
    assert (unknown.code, unknown.body["code"]) == (403, "approval_unknown")


@pytest.mark.parametrize(
    "body",
    [{"language": "python"}, {"code": "print(1)"}, {"timeout_sec": 5}, {"stdin": "x"}],
)
async def test_half_a_long_form_says_what_is_missing(api: Api, body: dict[str, Any]) -> None:
    answer = await api("POST", "api/sandbox/run", {**body, "approval_token": "t" * 43})
    assert (answer.code, answer.body["code"]) == (400, "missing_field")
    assert "approval_token alone" in answer.body["message"]


async def test_the_long_form_is_checked_against_the_same_spec(api: Api) -> None:
    # Planned with defaults; run naming each default explicitly: the same spec.
    body = {"language": "python", "code": "print(2)"}
    _plan, token = await plan_and_approve(api, **body)
    explicit = {
        **body,
        "timeout_sec": 120,
        "backend": "subprocess",
        "allow_network": False,
        "approval_token": token,
    }
    answer = await api("POST", "api/sandbox/run", explicit)
    assert answer.code == 200, answer.text
    # Another stdin than the plan's is another run.
    _plan, token = await plan_and_approve(api, **body, stdin="a")
    changed = await api("POST", "api/sandbox/run", {**body, "stdin": "b", "approval_token": token})
    assert (changed.code, changed.body["code"]) == (403, "approval_mismatch")
