"""Pending Plans on a real server: only plans waiting for someone else's decision, one count.

A notebook cell's plan, a REST caller's own plan and a blocked agent plan are
decided where they were made (or never can be): GET /plans does not list them
and the status does not count them. A rejected plan leaves both.
"""

from __future__ import annotations

from .helpers import Api

AGENT_PLAN = {"language": "python", "code": "print('from the agent')"}


async def waiting(api: Api) -> tuple[list[str], int]:
    """The ids GET /plans lists and the status's count."""
    listed = await api("GET", "api/sandbox/plans")
    status = await api("GET", "api/sandbox/status")
    assert listed.code == status.code == 200
    return [plan["plan_id"] for plan in listed.body["plans"]], status.body["waiting_plans"]


async def test_only_agent_plans_that_can_be_approved_are_waiting(api: Api) -> None:
    for source in ("cell", "api", "code_block", "file_run"):
        made = await api("POST", "api/sandbox/plan", {**AGENT_PLAN, "source": source})
        assert made.code == 200
    blocked = await api("POST", "api/sandbox/agent/plan", {"language": "bash", "code": "rm -rf /"})
    assert blocked.body["plan"]["blocked"] is True
    assert await waiting(api) == ([], 0)

    agent = await api("POST", "api/sandbox/agent/plan", AGENT_PLAN)
    plan_id = agent.body["plan"]["plan_id"]
    assert await waiting(api) == ([plan_id], 1)

    # Rejected (by the panel, a notebook card or the CLI): it leaves, and the count follows.
    rejected = await api("POST", "api/sandbox/reject", {"plan_id": plan_id})
    assert rejected.code == 200
    assert await waiting(api) == ([], 0)


async def test_an_approved_plan_leaves_the_list(api: Api) -> None:
    agent = await api("POST", "api/sandbox/agent/plan", AGENT_PLAN)
    plan_id = agent.body["plan"]["plan_id"]
    approved = await api("POST", "api/sandbox/approve", {"plan_id": plan_id})
    assert approved.code == 200
    assert await waiting(api) == ([], 0)
