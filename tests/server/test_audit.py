"""Audit events through jupyter_events: who, which plan, what ran, how it ended; never code."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from traitlets.config import Config

from .helpers import Api, approved_run

SECRET_CODE = "print('the-code-' + 'x')  # do-not-log-me"
TOKEN = "runner-token-never-logged"


async def test_plan_approve_run_and_config_are_audited(
    api: Api, jp_serverapp: Any, events: list[tuple[str, dict[str, Any]]]
) -> None:
    answer = await approved_run(api, "py", SECRET_CODE, stdin="typed input")
    assert answer.code == 200
    await api("PUT", "api/sandbox/config", {"matrixlab_token": TOKEN, "timeout_sec": 50})
    await jp_serverapp.event_logger.gather_listeners()

    kinds = [kind for kind, _ in events]
    assert kinds == ["plan", "approve", "run", "config"]
    plan, approve, run, config = (data for _, data in events)
    result = answer.body
    assert plan["plan_id"] == approve["plan_id"] == run["plan_id"] == result["plan_id"]
    assert plan["digest"] == approve["digest"] == run["digest"]
    assert run["language"] == "python" and run["backend"] == "subprocess"
    assert run["exit_code"] == 0 and run["duration_ms"] == result["duration_ms"]
    assert run["run_id"] == result["run_id"]
    assert sorted(config["keys"]) == ["matrixlab_token", "timeout_sec"]

    everything = json.dumps(events)
    for secret in ("the-code-", "do-not-log-me", "typed input", TOKEN):
        assert secret not in everything


class Collect(logging.Handler):
    """A logging handler an administrator would configure (a file, syslog...)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


COLLECT = Collect()


@pytest.mark.parametrize(
    "jp_server_config", [Config({"EventLogger": {"handlers": [COLLECT]}})], indirect=True
)
async def test_events_reach_the_configured_logging_handlers(api: Api) -> None:
    COLLECT.lines.clear()
    answer = await approved_run(api, "bash", "echo audited-output")
    assert answer.body["stdout"] == "audited-output\n"
    events = [json.loads(line) for line in COLLECT.lines]
    sandbox = [e for e in events if "gitpilot_jupyter/sandbox" in e["__schema__"]]
    assert [e["__schema__"].split("/")[-2] for e in sandbox] == ["plan", "approve", "run"]
    assert sandbox[-1]["exit_code"] == 0 and sandbox[-1]["language"] == "bash"
    assert "audited-output" not in "".join(COLLECT.lines)


async def test_reject_and_claim_are_audited(
    api: Api, jp_serverapp: Any, events: list[tuple[str, dict[str, Any]]]
) -> None:
    rejected = await api("POST", "api/sandbox/plan", {"language": "python", "code": "1"})
    plan_id = rejected.body["plan"]["plan_id"]
    assert (await api("POST", "api/sandbox/reject", {"plan_id": plan_id})).code == 200
    ticket = await api("POST", "api/sandbox/agent/plan", {"language": "bash", "code": "echo x"})
    claimed_id, secret = ticket.body["plan"]["plan_id"], ticket.body["claim"]
    claim = {"plan_id": claimed_id, "claim": secret}
    assert (await api("POST", "api/sandbox/agent/claim", claim)).body["state"] == "pending"
    await api("POST", "api/sandbox/approve", {"plan_id": claimed_id})
    assert (await api("POST", "api/sandbox/agent/claim", claim)).body["state"] == "approved"
    await jp_serverapp.event_logger.gather_listeners()

    kinds = [kind for kind, _ in events]
    assert kinds == ["plan", "reject", "plan", "approve", "claim"]  # a pending poll is not
    reject, claim_event = events[1][1], events[4][1]
    assert reject["plan_id"] == plan_id and reject["digest"].startswith("sha256:")
    assert claim_event == {"user": None, "plan_id": claimed_id, "state": "approved"}
    assert secret not in json.dumps(events)
