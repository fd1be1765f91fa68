"""The agent routes of the REST API, each answer checked against rest-api.yml."""

from __future__ import annotations

from tests.server.conftest import api, jp_server_config, openapi  # noqa: F401  (fixtures)
from tests.server.helpers import Api

PLAN = {"language": "python", "code": "print('agent says hi')"}


async def test_claim_hands_the_token_to_the_planner_once(api: Api) -> None:  # noqa: F811
    planned = await api("POST", "api/sandbox/agent/plan", PLAN)
    assert planned.code == 200, planned.text
    plan, claim = planned.body["plan"], planned.body["claim"]
    assert plan["source"] == "agent"
    assert "approval_token" not in planned.body
    body = {"plan_id": plan["plan_id"], "claim": claim}

    waiting = await api("POST", "api/sandbox/agent/claim", body)
    assert waiting.body == {"state": "pending"}

    listed = await api("GET", "api/sandbox/plans")
    assert plan["plan_id"] in [p["plan_id"] for p in listed.body["plans"]]

    approved = await api("POST", "api/sandbox/approve", {"plan_id": plan["plan_id"]})
    assert approved.code == 200
    claimed = await api("POST", "api/sandbox/agent/claim", body)
    assert claimed.body["state"] == "approved"
    token = claimed.body["approval_token"]

    again = await api("POST", "api/sandbox/agent/claim", body)
    assert again.code == 403 and again.body["code"] == "claim_invalid"

    ran = await api("POST", "api/sandbox/run", {**PLAN, "approval_token": token})
    assert ran.code == 200 and ran.body["stdout"] == "agent says hi\n"


async def test_wrong_claim_secret_is_refused(api: Api) -> None:  # noqa: F811
    planned = await api("POST", "api/sandbox/agent/plan", PLAN)
    wrong = {"plan_id": planned.body["plan"]["plan_id"], "claim": "x" * 43}
    answer = await api("POST", "api/sandbox/agent/claim", wrong)
    assert answer.code == 403 and answer.body["code"] == "claim_invalid"


async def test_auto_plan_is_approved_by_the_agent(api: Api) -> None:  # noqa: F811
    planned = await api("POST", "api/sandbox/agent/plan", {**PLAN, "approve": True})
    assert planned.code == 200
    assert "claim" not in planned.body
    token = planned.body["approval_token"]
    ran = await api("POST", "api/sandbox/run", {**PLAN, "approval_token": token})
    assert ran.code == 200 and ran.body["exit_code"] == 0


async def test_blocked_agent_plan_gets_neither_claim_nor_token(api: Api) -> None:  # noqa: F811
    body = {"language": "bash", "code": "rm -rf /", "approve": True}
    planned = await api("POST", "api/sandbox/agent/plan", body)
    assert planned.code == 200 and planned.body["plan"]["blocked"] is True
    assert set(planned.body) == {"plan"}


async def test_rejected_plan_ends_the_claim(api: Api) -> None:  # noqa: F811
    planned = await api("POST", "api/sandbox/agent/plan", PLAN)
    plan_id = planned.body["plan"]["plan_id"]
    rejected = await api("POST", "api/sandbox/reject", {"plan_id": plan_id})
    assert rejected.body == {"plan_id": plan_id, "rejected": True}
    claim = {"plan_id": plan_id, "claim": planned.body["claim"]}
    gone = await api("POST", "api/sandbox/agent/claim", claim)
    assert gone.code == 404 and gone.body["code"] == "plan_not_found"
    twice = await api("POST", "api/sandbox/reject", {"plan_id": plan_id})
    assert twice.code == 404


async def test_agent_plan_body_is_checked(api: Api) -> None:  # noqa: F811
    answer = await api("POST", "api/sandbox/agent/plan", {**PLAN, "source": "cell"})
    assert answer.code == 400 and answer.body["code"] == "unknown_field"


async def test_other_clients_cannot_evict_an_agents_plan(api: Api) -> None:  # noqa: F811
    """300 plans from any client later, the agent's claim still says pending."""
    planned = await api("POST", "api/sandbox/agent/plan", PLAN)
    body = {"plan_id": planned.body["plan"]["plan_id"], "claim": planned.body["claim"]}
    for i in range(300):
        flood = await api("POST", "api/sandbox/plan", {"language": "python", "code": f"{i}"})
        assert flood.code == 200
    assert (await api("POST", "api/sandbox/agent/claim", body)).body == {"state": "pending"}


async def test_a_client_cannot_label_its_plan_source_agent(api: Api) -> None:  # noqa: F811
    forged = await api("POST", "api/sandbox/plan", {**PLAN, "source": "agent"})
    assert (forged.code, forged.body["code"]) == (400, "invalid_value"), forged.text
    listed = await api("GET", "api/sandbox/plans")
    assert all(p["source"] != "agent" for p in listed.body["plans"])
