"""The agent tools in-process: real runs, each approval mode, refusals, the claim secret."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import gitpilot_jupyter.agents as agents
from gitpilot_jupyter.agents import AgentSandbox
from gitpilot_jupyter.sandbox.errors import ApprovalError, InvalidSetting, PlanNotFound
from gitpilot_jupyter.sandbox.plans import PlanStore
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.sync import run_sync


class Recorder:
    """An audit hook keeping every event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.events]


@pytest.fixture
def audit() -> Recorder:
    return Recorder()


@pytest.fixture
def service(audit: Recorder) -> SandboxService:
    return SandboxService(audit=audit)


def test_auto_runs_and_records_the_agent_as_approver(
    service: SandboxService, audit: Recorder
) -> None:
    sandbox = AgentSandbox(approval="auto", service=service)
    reply = sandbox.run_in_sandbox("py", "print(6 * 7)")
    assert reply.status == "completed" and reply.ok
    assert "Exit code: 0" in reply.text
    assert "--- stdout ---\n42" in reply.text
    assert "Sandbox: subprocess" in reply.text
    approvals = [data for kind, data in audit.events if kind == "approve"]
    assert approvals and approvals[0]["approved_by"] == "agent"
    assert audit.kinds() == ["plan", "approve", "run"]


def test_traceback_comes_back_structured(service: SandboxService) -> None:
    sandbox = AgentSandbox(approval="auto", service=service)
    reply = sandbox.run_in_sandbox("python", "print('before')\nraise ValueError('boom')\n")
    assert reply.status == "completed" and not reply.ok
    assert reply.result is not None and reply.result.exit_code == 1
    assert "Exit code: 1" in reply.text
    assert "--- stdout ---\nbefore" in reply.text
    stderr = reply.text.split("--- stderr ---\n", 1)[1]
    assert "Traceback (most recent call last):" in stderr
    assert "ValueError: boom" in stderr


def test_timeout_keeps_output_and_warns(service: SandboxService) -> None:
    sandbox = AgentSandbox(approval="auto", service=service)
    reply = sandbox.run_command("echo started; sleep 30", timeout_sec=1)
    assert reply.result is not None and reply.result.timed_out
    assert "WARNING: Command timed out after 1 s" in reply.text
    assert "Exit code: -1" in reply.text
    assert "Command: echo started; sleep 30" in reply.text
    assert "--- stdout ---\nstarted" in reply.text


def test_huge_output_is_truncated_and_shortened_for_the_model(service: SandboxService) -> None:
    sandbox = AgentSandbox(approval="auto", service=service, max_output_bytes=2000)
    code = "print('HEAD'); print('x' * 700_000); print('TAIL')"
    reply = sandbox.run_in_sandbox("python", code)
    assert reply.result is not None and reply.result.truncated
    assert "WARNING: Output was truncated" in reply.text
    assert "bytes left out" in reply.text
    assert "HEAD" in reply.text
    assert len(reply.text.encode()) < 3000


def test_destructive_command_is_refused_in_every_mode(
    service: SandboxService, audit: Recorder
) -> None:
    for mode in ("auto", "ask"):
        reply = AgentSandbox(approval=mode, service=service).run_command("rm -rf /")
        assert reply.status == "refused"
        assert reply.result is None
        assert "Refused by policy" in reply.text and "rm -rf /" in reply.text
        assert "can never be approved" in reply.text
    assert "run" not in audit.kinds() and "approve" not in audit.kinds()


def test_deny_runs_nothing_and_says_why(
    service: SandboxService, audit: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITPILOT_AGENT_APPROVAL", "deny")
    reply = AgentSandbox(service=service).run_in_sandbox("python", "print(1)")
    assert reply.status == "denied"
    assert "switched off for agents" in reply.text
    assert "GITPILOT_AGENT_APPROVAL" in reply.text
    assert audit.events == []


def test_unknown_mode_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITPILOT_AGENT_APPROVAL", "sometimes")
    with pytest.raises(InvalidSetting, match="expected one of"):
        AgentSandbox()


def test_invalid_request_is_reported_as_text(service: SandboxService) -> None:
    reply = AgentSandbox(approval="auto", service=service).run_in_sandbox("cobol", "DISPLAY 1")
    assert reply.status == "error"
    assert reply.error_code == "unknown_language"
    assert "Nothing was run" in reply.text


def test_ask_waits_for_a_person_then_runs(service: SandboxService, audit: Recorder) -> None:
    sandbox = AgentSandbox(service=service)  # the default mode is ask
    assert sandbox.mode == "ask"
    reply = sandbox.run_in_sandbox("python", "print('approved run')")
    assert reply.status == "approval_pending"
    assert reply.plan_id is not None
    assert f"plan_id: {reply.plan_id}" in reply.text
    assert "run" not in audit.kinds()
    pending = service.plans.pending()
    assert [p.plan_id for p in pending] == [reply.plan_id]
    assert pending[0].source == "agent"

    still = sandbox.wait_for_approval(reply.plan_id, 0.3)
    assert still.status == "approval_pending" and "Still waiting" in still.text

    service.plans.approve(reply.plan_id)  # a person, through whatever face
    done = sandbox.wait_for_approval(reply.plan_id, 5)
    assert done.status == "completed" and done.ok
    assert "approved run" in done.text
    assert audit.kinds().count("run") == 1


def test_ask_rejected_plan_never_runs(service: SandboxService, audit: Recorder) -> None:
    sandbox = AgentSandbox(approval="ask", service=service)
    reply = sandbox.run_command("echo should-not-run")
    service.plans.reject(reply.plan_id or "")
    answer = sandbox.wait_for_approval(reply.plan_id or "", 5)
    assert answer.status == "not_approved"
    assert "Nothing was run" in answer.text
    assert "run" not in audit.kinds()


def test_private_in_process_plans_say_who_can_approve() -> None:
    sandbox = AgentSandbox(server="local")
    reply = sandbox.run_in_sandbox("python", "print(1)")
    assert reply.status == "approval_pending"
    assert "No Jupyter server is connected" in reply.text
    sandbox.approve(reply.plan_id or "")
    assert sandbox.wait_for_approval(reply.plan_id or "", 5).ok


def test_claim_secret_is_needed_and_hands_the_token_over_once(service: SandboxService) -> None:
    made = run_sync(service.plan(RunOptions(language="python", code="print(1)"), agent=True))
    secret = service.workflow.claims.open(made.plan_id)
    with pytest.raises(ApprovalError) as wrong:
        service.workflow.claims.claim(made.plan_id, "guessed")
    assert wrong.value.code == "claim_invalid"
    assert service.workflow.claims.claim(made.plan_id, secret).state == "pending"
    service.plans.approve(made.plan_id)
    answer = service.workflow.claims.claim(made.plan_id, secret)
    assert answer.state == "approved" and answer.approval_token
    with pytest.raises(ApprovalError):
        service.workflow.claims.claim(made.plan_id, secret)


def test_module_functions_follow_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITPILOT_AGENT_APPROVAL", "auto")
    monkeypatch.setenv("GITPILOT_JUPYTER_URL", "local")
    monkeypatch.setattr(agents, "_default", None)
    text = agents.run_in_sandbox("python", "print('from the function')")
    assert "Exit code: 0" in text and "from the function" in text
    assert "Exit code: 0" in agents.run_command("true")
    assert "Agent approval mode: auto" in agents.sandbox_status()
    monkeypatch.setattr(agents, "_default", None)


def test_evicted_plan_ends_the_wait(audit: Recorder) -> None:
    service = SandboxService(plans=PlanStore(max_pending=1), audit=audit)
    sandbox = AgentSandbox(approval="ask", service=service)
    first = sandbox.run_in_sandbox("python", "print(1)")
    sandbox.run_in_sandbox("python", "print(2)")  # evicts the first
    with pytest.raises(PlanNotFound):
        service.plans.get(first.plan_id or "")
    assert sandbox.wait_for_approval(first.plan_id or "", 2).status == "not_approved"


def test_a_variable_reaches_an_agents_snippet_only_when_on_the_agents_list(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEST_DB_URL", "postgres://u:secret@db/x")
    sandbox = AgentSandbox(approval="auto", service=service)
    code = "import os; print(os.environ.get('TEST_DB_URL'))"
    assert sandbox.run_in_sandbox("python", code).result.stdout == "None\n"  # type: ignore[union-attr]
    # A person's allowlist is not an agent's: listed for callers only, the agent is refused.
    service.policy = dataclasses.replace(service.policy, caller_vars=frozenset({"TEST_DB_URL"}))
    refused = sandbox.run_in_sandbox("python", code, env=["TEST_DB_URL"])
    assert (refused.status, refused.error_code) == ("error", "env_not_allowed")
    assert refused.result is None
    assert "agent_env_allowlist" in refused.text
    service.policy = dataclasses.replace(service.policy, agent_vars=frozenset({"TEST_DB_URL"}))
    named = sandbox.run_in_sandbox("python", code, env=["TEST_DB_URL"])
    assert named.plan is not None and named.plan["env"] == ["TEST_DB_URL"]
    assert {"label": "passes the server's TEST_DB_URL", "ok": False} in named.plan["checks"]
    assert named.result is not None and named.result.stdout == "postgres://u:secret@db/x\n"
    shell = sandbox.run_command('echo "$TEST_DB_URL"', env=["TEST_DB_URL"])
    assert shell.result is not None and shell.result.stdout == "postgres://u:secret@db/x\n"
