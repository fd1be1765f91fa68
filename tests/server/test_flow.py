"""Plan -> approve -> run through the REST API, the approval refusals, plans and status."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest

from tests.support.system import require_system

from .helpers import Api, approved_run, plan_and_approve

SNIPPETS = {
    "python": ("import sys\nprint('hello from python')\nprint('oops', file=sys.stderr)", "py"),
    "javascript": ("console.log('hello from javascript'); console.error('oops')", "node"),
    "bash": ("echo hello from bash; echo oops >&2", "sh"),
}


@pytest.mark.parametrize("language", sorted(SNIPPETS))
async def test_plan_approve_run_each_language(api: Api, language: str) -> None:
    if language == "javascript":
        require_system("node", shutil.which("node") is not None, "javascript runs need node")
    code, alias = SNIPPETS[language]
    plan, token = await plan_and_approve(api, language=alias, code=code)
    assert plan["language"] == language
    assert plan["plan_id"].startswith("plan_") and plan["requires_approval"] is True
    assert plan["owner"] is None  # a shared token login: every holder is one principal
    assert len(token) >= 43

    # Planned with an alias, run with the canonical name: the same snippet.
    body = {"language": language, "code": code, "approval_token": token}
    answer = await api("POST", "api/sandbox/run", body)
    assert answer.code == 200, answer.text
    result = answer.body
    assert result["exit_code"] == 0
    assert f"hello from {language}" in result["stdout"]
    assert "oops" in result["stderr"]
    assert result["plan_id"] == plan["plan_id"]
    assert result["backend"] == "subprocess" and result["timed_out"] is False


async def test_failing_snippet_is_a_200_with_its_exit_code(api: Api) -> None:
    answer = await approved_run(api, "python", "raise SystemExit(3)")
    assert answer.code == 200
    assert answer.body["exit_code"] == 3
    answer = await approved_run(api, "python", "1/0")
    assert answer.body["exit_code"] == 1 and "ZeroDivisionError" in answer.body["stderr"]


async def test_run_without_approval_is_refused_and_never_runs(api: Api, tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')"
    answer = await api("POST", "api/sandbox/run", {"language": "python", "code": code})
    assert answer.code == 403
    assert answer.body["code"] == "approval_required"
    assert answer.body["reason"] == "Forbidden"
    assert not marker.exists()


async def test_each_approval_refusal_has_its_code(api: Api) -> None:
    code = "print(1)"
    run = {"language": "python", "code": code}

    answer = await api("POST", "api/sandbox/run", {**run, "approval_token": "x" * 43})
    assert (answer.code, answer.body["code"]) == (403, "approval_unknown")

    _, token = await plan_and_approve(api, **run)
    changed = await api(
        "POST", "api/sandbox/run", {**run, "code": "print(2)", "approval_token": token}
    )
    assert (changed.code, changed.body["code"]) == (403, "approval_mismatch")
    # A mismatch does not spend the token: the approved code still runs once.
    first = await api("POST", "api/sandbox/run", {**run, "approval_token": token})
    assert first.code == 200 and first.body["stdout"] == "1\n"
    again = await api("POST", "api/sandbox/run", {**run, "approval_token": token})
    assert (again.code, again.body["code"]) == (403, "approval_used")

    _, token = await plan_and_approve(api, **run, session_id="nb-1")
    other = await api(
        "POST", "api/sandbox/run", {**run, "approval_token": token, "session_id": "nb-2"}
    )
    assert (other.code, other.body["code"]) == (403, "approval_session")
    for field, value in (("timeout_sec", 7), ("stdin", "x"), ("allow_network", True)):
        _, token = await plan_and_approve(api, **run)
        answer = await api(
            "POST", "api/sandbox/run", {**run, field: value, "approval_token": token}
        )
        assert (answer.code, answer.body["code"]) == (403, "approval_mismatch"), field


@pytest.mark.parametrize("jp_server_config", [{"plan_ttl_sec": 0.5}], indirect=True)
async def test_expired_approval(api: Api) -> None:
    _, token = await plan_and_approve(api, language="python", code="print(1)")
    await asyncio.sleep(0.8)
    body = {"language": "python", "code": "print(1)", "approval_token": token}
    answer = await api("POST", "api/sandbox/run", body)
    assert (answer.code, answer.body["code"]) == (403, "approval_expired")


async def test_unknown_plan_is_404_and_consumed_plan_too(api: Api) -> None:
    answer = await api("POST", "api/sandbox/approve", {"plan_id": "plan_0000000000000000"})
    assert (answer.code, answer.body["code"]) == (404, "plan_not_found")
    plan, _ = await plan_and_approve(api, language="python", code="print(1)")
    again = await api("POST", "api/sandbox/approve", {"plan_id": plan["plan_id"]})
    assert (again.code, again.body["code"]) == (404, "plan_not_found")


async def test_blocked_plan_is_409_and_never_runs(api: Api) -> None:
    answer = await api("POST", "api/sandbox/plan", {"language": "bash", "code": "rm -rf /"})
    assert answer.code == 200
    plan = answer.body["plan"]
    assert plan["blocked"] is True and "rm -rf /" in plan["blocked_reason"]
    approve = await api("POST", "api/sandbox/approve", {"plan_id": plan["plan_id"]})
    assert (approve.code, approve.body["code"]) == (409, "plan_blocked")


async def test_plan_reports_warnings_and_checks(api: Api) -> None:
    code = "import os, subprocess\nsubprocess.run(['ls'])\nos.system('ls')"
    answer = await api("POST", "api/sandbox/plan", {"language": "python", "code": code})
    plan = answer.body["plan"]
    assert any(w["severity"] == "high" for w in plan["warnings"])
    assert all(check["ok"] for check in plan["checks"] if "destructive" in check["label"])
    assert plan["command"] == ["python", "inline.py"]
    assert plan["source"] == "api" and plan["network"] is False


async def test_pending_plans_are_listed_until_approved(api: Api) -> None:
    agent = {"language": "py"}
    one = (await api("POST", "api/sandbox/agent/plan", {**agent, "code": "1"})).body["plan"]
    two = (
        await api("POST", "api/sandbox/agent/plan", {**agent, "code": "2", "session_id": "nb-9"})
    ).body["plan"]
    # A plan its maker decides (a cell's, a REST caller's) is not waiting for anyone.
    await api("POST", "api/sandbox/plan", {"language": "py", "code": "3", "source": "cell"})
    listed = await api("GET", "api/sandbox/plans")
    assert [p["plan_id"] for p in listed.body["plans"]] == [one["plan_id"], two["plan_id"]]
    mine = await api("GET", "api/sandbox/plans", params={"session_id": "nb-9"})
    assert [p["plan_id"] for p in mine.body["plans"]] == [two["plan_id"]]
    await api("POST", "api/sandbox/approve", {"plan_id": one["plan_id"]})
    listed = await api("GET", "api/sandbox/plans")
    assert [p["plan_id"] for p in listed.body["plans"]] == [two["plan_id"]]


@pytest.mark.parametrize("jp_server_config", [{"require_approval": False}], indirect=True)
async def test_approval_switched_off_by_server_config(api: Api) -> None:
    status = await api("GET", "api/sandbox/status")
    assert status.body["require_approval"] is False
    answer = await api("POST", "api/sandbox/run", {"language": "python", "code": "print(6*7)"})
    assert answer.code == 200 and answer.body["stdout"] == "42\n"
    assert answer.body["plan_id"] is None
