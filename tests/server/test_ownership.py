"""A plan belongs to the identity that made it (an identity provider with two real users).

Under jupyter_server's shared-token login every caller is one principal and nothing
changes (the rest of the server suite runs that way).
"""

from __future__ import annotations

from typing import Any

import pytest

from .helpers import Api
from .test_auth import XSRF, HeaderIdentityProvider, server_config

XSRF_HEADERS = {"Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF}
ALICE = {"X-Test-User": "alice", **XSRF_HEADERS}
BOB = {"X-Test-User": "bob", **XSRF_HEADERS}
SNIPPET = {"language": "python", "code": "print('mine')"}


@pytest.fixture
def jp_server_config() -> Any:
    config = server_config()
    config.ServerApp.identity_provider_class = HeaderIdentityProvider
    return config


async def pending_ids(api: Api, who: dict[str, str]) -> list[str]:
    answer = await api("GET", "api/sandbox/plans", headers=who)
    assert answer.code == 200, answer.text
    return [plan["plan_id"] for plan in answer.body["plans"]]


async def test_pending_lists_only_ones_own_plans(api: Api) -> None:
    # Agents' plans (what Pending Plans lists), each made with its person's identity.
    mine = (await api("POST", "api/sandbox/agent/plan", SNIPPET, headers=ALICE)).body["plan"]
    theirs = (await api("POST", "api/sandbox/agent/plan", SNIPPET, headers=BOB)).body["plan"]
    assert await pending_ids(api, ALICE) == [mine["plan_id"]]
    assert await pending_ids(api, BOB) == [theirs["plan_id"]]
    # Each plan says whose it is, in every answer (what Pending Plans shows).
    assert (mine["owner"], theirs["owner"]) == ("alice", "bob")
    listed = await api("GET", "api/sandbox/plans", headers=ALICE)
    assert [plan["owner"] for plan in listed.body["plans"]] == ["alice"]


async def test_others_cannot_approve_or_reject(api: Api) -> None:
    plan_id = (await api("POST", "api/sandbox/plan", SNIPPET, headers=ALICE)).body["plan"][
        "plan_id"
    ]
    for route in ("approve", "reject"):
        answer = await api("POST", f"api/sandbox/{route}", {"plan_id": plan_id}, headers=BOB)
        assert (answer.code, answer.body["code"]) == (404, "plan_not_found"), route
    # Still Alice's, still pending: she approves and runs it.
    approval = await api("POST", "api/sandbox/approve", {"plan_id": plan_id}, headers=ALICE)
    token = approval.body["approval_token"]
    stolen = await api("POST", "api/sandbox/run", {"approval_token": token}, headers=BOB)
    assert stolen.code == 403 and stolen.body["code"] in ("approval_session", "not_plan_owner")
    own = await api("POST", "api/sandbox/run", {"approval_token": token}, headers=ALICE)
    assert own.code == 200 and own.body["stdout"] == "mine\n"


async def test_an_agents_plan_shows_to_the_person_it_acts_for(api: Api) -> None:
    # The agent calls with Alice's identity (her token): its plan is hers to decide.
    ticket = await api("POST", "api/sandbox/agent/plan", SNIPPET, headers=ALICE)
    plan_id, secret = ticket.body["plan"]["plan_id"], ticket.body["claim"]
    assert plan_id in await pending_ids(api, ALICE)
    assert plan_id not in await pending_ids(api, BOB)
    refused = await api("POST", "api/sandbox/approve", {"plan_id": plan_id}, headers=BOB)
    assert refused.code == 404
    claim = {"plan_id": plan_id, "claim": secret}
    # Bob, even holding the secret, cannot claim what Alice's agent planned.
    pending = await api("POST", "api/sandbox/agent/claim", claim, headers=BOB)
    assert (pending.code, pending.body["code"]) == (404, "plan_not_found")
    await api("POST", "api/sandbox/approve", {"plan_id": plan_id}, headers=ALICE)
    stolen = await api("POST", "api/sandbox/agent/claim", claim, headers=BOB)
    assert (stolen.code, stolen.body["code"]) == (403, "not_plan_owner")
    claimed = await api("POST", "api/sandbox/agent/claim", claim, headers=ALICE)
    assert claimed.body["state"] == "approved"
    ran = await api(
        "POST", "api/sandbox/run", {"approval_token": claimed.body["approval_token"]}, headers=ALICE
    )
    assert ran.code == 200 and ran.body["stdout"] == "mine\n"
