"""A run refused at run time keeps its token unspent and is audited as ``refused``.

A refusal after the token was presented (its run id in use, its backend no longer
allowed, ...) means no code reached a backend: the token works for the next try,
and the audit log records a refusal, not a run that never happened.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gitpilot_jupyter.server.base import SERVICE_KEY

from .helpers import Api, plan_and_approve
from .test_cancel import approved_sleeper, gone, running_sleeper


async def test_a_run_refused_for_its_run_id_keeps_its_token(
    api: Api, events: list[tuple[str, dict[str, Any]]], jp_serverapp: Any, client: httpx.AsyncClient
) -> None:
    marker, body = await approved_sleeper(api)
    second, token2 = await plan_and_approve(api, language="python", code="print(6 * 7)")
    again = {"language": "python", "code": "print(6 * 7)", "approval_token": token2}
    async with client:
        running = await running_sleeper(client, marker, body)
        clash = await api("POST", "api/sandbox/run", {**again, "run_id": body["run_id"]})
        assert clash.code == 400 and clash.body["code"] == "run_id_in_use"
        assert (await api("DELETE", f"api/sandbox/runs/{body['run_id']}")).code == 200
        assert (await running).json()["cancelled"] is True
    assert await gone(marker)

    # The refused run spent nothing: the same token runs the plan now, once.
    answer = await api("POST", "api/sandbox/run", again)
    assert answer.code == 200 and answer.body["stdout"] == "42\n"
    assert answer.body["plan_id"] == second["plan_id"]
    replay = await api("POST", "api/sandbox/run", again)
    assert replay.code == 403 and replay.body["code"] == "approval_used"

    await jp_serverapp.event_logger.gather_listeners()
    mine = [(kind, data) for kind, data in events if data.get("plan_id") == second["plan_id"]]
    assert [kind for kind, _ in mine] == ["plan", "approve", "refused", "run"]
    refused, ran = mine[2][1], mine[3][1]
    assert refused["code"] == "run_id_in_use" and refused["error"] == "InvalidRequest"
    assert refused["digest"] == second["digest"] == ran["digest"]
    assert ran["exit_code"] == 0 and ran["run_id"] == answer.body["run_id"] != body["run_id"]
    runs = [data["run_id"] for kind, data in events if kind == "run"]
    assert sorted(runs) == sorted([body["run_id"], answer.body["run_id"]]), "one run event per run"


@pytest.mark.parametrize("jp_server_config", [{"allowed_backends": ["subprocess"]}], indirect=True)
async def test_a_backend_refused_at_run_time_keeps_the_token(
    api: Api, jp_serverapp: Any, events: list[tuple[str, dict[str, Any]]]
) -> None:
    planned, token = await plan_and_approve(api, language="bash", code="echo ran")
    body = {"approval_token": token}  # a run by token alone: the approved plan runs
    resolver = jp_serverapp.web_app.settings[SERVICE_KEY].backends
    # The administrator withdraws the backend between the approval and the run.
    resolver.allowed_backends = ("matrixlab",)
    try:
        refused = await api("POST", "api/sandbox/run", body)
    finally:
        resolver.allowed_backends = ("subprocess",)
    assert refused.code == 403 and refused.body["code"] == "backend_not_allowed", refused.text
    answer = await api("POST", "api/sandbox/run", body)
    assert answer.code == 200 and answer.body["stdout"] == "ran\n"

    await jp_serverapp.event_logger.gather_listeners()
    kinds = [kind for kind, data in events if data.get("plan_id") == planned["plan_id"]]
    assert kinds == ["plan", "approve", "refused", "run"]
