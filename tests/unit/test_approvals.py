"""Plan -> approve -> run: every refusal has its own code; a mismatch does not spend the token."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gitpilot_jupyter.sandbox.errors import (
    ApprovalError,
    ConfirmationRequired,
    EmptyCode,
    FileAccessError,
    InvalidRequest,
    PlanBlocked,
    PlanNotFound,
    PolicyViolation,
    UnknownLanguage,
)
from gitpilot_jupyter.sandbox.plans import ExecutionPlan, PlanStore
from gitpilot_jupyter.sandbox.request import Caller, RunOptions
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore

T = TypeVar("T")


def sync(awaitable: Awaitable[T]) -> T:
    async def wrap() -> T:
        return await awaitable

    return asyncio.run(wrap())


def approved(service: SandboxService, **plan: Any) -> str:
    p = sync(service.plan(RunOptions.from_body(plan), Caller.from_body(plan, None)))
    return str(
        sync(service.approve(p.plan_id, Caller(session_id=plan.get("session_id"))))[
            "approval_token"
        ]
    )


def long_run(service: SandboxService, **run: Any) -> Awaitable[RunResult]:
    """The long form of a run, as ``POST /api/sandbox/run`` sends it."""
    caller = Caller.from_body(run, None)
    return service.run(run.get("approval_token"), caller, expected=RunOptions.from_body(run))


def refusal(service: SandboxService, **run: Any) -> str:
    with pytest.raises(ApprovalError) as info:
        sync(long_run(service, **run))
    assert info.value.status == 403
    return info.value.code


def test_plan_describes_the_run(service: SandboxService) -> None:
    plan = sync(
        service.plan(RunOptions(language="py", code="import os\nos.system('ls')", source="cell"))
    )
    data = plan.to_dict()
    assert data["plan_id"].startswith("plan_") and len(data["plan_id"]) == 21
    assert data["language"] == "python" and data["command"] == ["python", "inline.py"]
    assert data["backend"] == "subprocess" and data["timeout_sec"] == 120
    assert data["network"] is False and data["blocked"] is False
    assert data["requires_approval"] is True and data["source"] == "cell"
    assert data["digest"].startswith("sha256:")
    os_system = [w for w in data["warnings"] if w["label"] == "os.system"]
    assert os_system and os_system[0]["severity"] == "high", data["warnings"]
    assert "runs a shell command" in os_system[0]["detail"]
    assert all({"label", "ok"} <= set(c) for c in data["checks"])


def test_approved_run_runs_once(service: SandboxService) -> None:
    token = approved(service, language="python", code="print(2+2)")
    assert len(token) >= 43
    result = sync(service.run(token, expected=RunOptions(language="python", code="print(2+2)")))
    assert result.stdout == "4\n" and result.plan_id
    assert (
        refusal(service, language="python", code="print(2+2)", approval_token=token)
        == "approval_used"
    )


def test_no_token_and_unknown_token(service: SandboxService) -> None:
    assert refusal(service, language="python", code="print(1)") == "approval_required"
    assert (
        refusal(service, language="python", code="print(1)", approval_token="x" * 43)
        == "approval_unknown"
    )


def test_expired_token(sandbox_config_dir: Path) -> None:
    now = [1000.0]
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir), plans=PlanStore(clock=lambda: now[0])
    )
    token = approved(service, language="python", code="print(1)")
    now[0] += 301
    assert (
        refusal(service, language="python", code="print(1)", approval_token=token)
        == "approval_expired"
    )


def test_a_used_token_says_used_until_twice_its_lifetime_then_unknown(
    sandbox_config_dir: Path,
) -> None:
    now = [1000.0]
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir), plans=PlanStore(clock=lambda: now[0])
    )

    def used(code: str) -> str:
        token = approved(service, language="python", code=code)
        sync(service.run(token, expected=RunOptions(language="python", code=code)))
        return token

    def replay(token: str, code: str) -> str:
        return refusal(service, language="python", code=code, approval_token=token)

    first = used("print(1)")  # expires at 1300, forgotten after 1600
    now[0] = 1200.0
    second = used("print(2)")  # expires at 1500, forgotten after 1800
    now[0] = 900.0  # the clock went back: this one is forgotten first, after 1500
    third = used("print(3)")
    now[0] = 1550.0
    approved(service, language="python", code="print(4)")  # an approval forgets the old ones
    assert replay(third, "print(3)") == "approval_unknown"
    assert replay(first, "print(1)") == "approval_used"
    assert replay(second, "print(2)") == "approval_used"
    now[0] = 1700.0
    approved(service, language="python", code="print(5)")
    assert replay(first, "print(1)") == "approval_unknown"
    assert replay(second, "print(2)") == "approval_used"
    now[0] = 1801.0
    approved(service, language="python", code="print(6)")
    assert replay(second, "print(2)") == "approval_unknown"


def test_other_session(service: SandboxService) -> None:
    token = approved(service, language="python", code="print(1)", session_id="s1")
    assert (
        refusal(service, language="python", code="print(1)", approval_token=token, session_id="s2")
        == "approval_session"
    )
    result = sync(
        service.run(
            token, Caller(session_id="s1"), expected=RunOptions(language="python", code="print(1)")
        )
    )
    assert result.exit_code == 0


@pytest.mark.parametrize(
    "change",
    [
        {"code": "print(3)"},
        {"timeout_sec": 7},
        {"language": "bash", "code": "print(1)"},
        {"stdin": "hello"},
        {"allow_network": True},
        {"backend": "off"},
    ],
)
@pytest.mark.usefixtures("allow_off")
def test_mismatch_is_refused_and_does_not_spend_the_token(
    service: SandboxService, change: dict[str, Any]
) -> None:
    token = approved(service, language="python", code="print(1)", timeout_sec=5)
    run = {"language": "python", "code": "print(1)", "timeout_sec": 5, "approval_token": token}
    assert refusal(service, **{**run, **change}) == "approval_mismatch"
    assert sync(long_run(service, **run)).stdout == "1\n"


def test_alias_then_canonical_is_the_same_snippet(service: SandboxService) -> None:
    token = approved(service, language="py", code="print(5)")
    result = sync(service.run(token, expected=RunOptions(language="python", code="print(5)")))
    assert result.stdout == "5\n"


def test_blocked_plan_cannot_be_approved(service: SandboxService) -> None:
    plan = sync(service.plan(RunOptions(language="bash", code="rm -rf /")))
    assert plan.blocked and "rm -rf /" in (plan.blocked_reason or "")
    with pytest.raises(PlanBlocked) as info:
        sync(service.approve(plan.plan_id))
    assert info.value.status == 409


def test_unknown_and_consumed_plans_are_404(service: SandboxService) -> None:
    with pytest.raises(PlanNotFound):
        sync(service.approve("plan_0000000000000000"))
    plan = sync(service.plan(RunOptions(language="python", code="print(1)")))
    sync(service.approve(plan.plan_id))
    with pytest.raises(PlanNotFound) as info:
        sync(service.approve(plan.plan_id))
    assert info.value.status == 404


def test_oldest_plans_are_evicted_beyond_256(service: SandboxService) -> None:
    first = sync(service.plan(RunOptions(language="python", code="print(0)")))
    for i in range(256):
        sync(service.plan(RunOptions(language="python", code=f"print({i + 1})")))
    with pytest.raises(PlanNotFound):
        sync(service.approve(first.plan_id))
    assert len(service.plans.pending()) == 256


def test_other_traffic_cannot_evict_a_pending_agent_plan(service: SandboxService) -> None:
    agent = sync(service.plan(RunOptions(language="python", code="print('agent')"), agent=True))
    assert agent.source == "agent"
    for i in range(300):  # as many plans as any client likes, from the same identity
        sync(service.plan(RunOptions(language="python", code=f"print({i})")))
    assert service.plans.get(agent.plan_id) is agent
    assert len(service.plans.pending()) == 257  # 256 of the client's, and the agent's


def test_plans_are_bounded_per_identity(service: SandboxService) -> None:
    alice = sync(
        service.plan(RunOptions(language="python", code="print('alice')"), Caller(user="alice"))
    )
    for i in range(300):
        sync(
            service.plan(RunOptions(language="python", code=f"print({i})"), Caller(user="mallory"))
        )
    assert service.plans.get(alice.plan_id) is alice
    mallorys = [p for p in service.plans.pending() if p.plan_id != alice.plan_id]
    assert len(mallorys) == 256 and mallorys[-1].spec.code == "print(299)"


def test_the_store_has_a_total_bound_that_spares_agent_plans() -> None:
    store = PlanStore(max_pending=4, max_total=10)
    service = SandboxService(plans=store)
    agent = sync(service.plan(RunOptions(language="python", code="print('agent')"), agent=True))
    for user in range(10):
        for i in range(4):
            sync(
                service.plan(
                    RunOptions(language="python", code=f"print({i})"), Caller(user=f"u{user}")
                )
            )
    assert len(store.pending()) == 10 and store.get(agent.plan_id) is agent


def test_no_caller_can_label_its_plan_as_an_agents(service: SandboxService) -> None:
    with pytest.raises(InvalidRequest) as refused:
        sync(service.plan(RunOptions(language="python", code="print(1)", source="agent")))
    assert refused.value.code == "invalid_value"


def test_run_checks_come_after_approval(service: SandboxService) -> None:
    # Without a token every bad run is a 403 first ...
    assert refusal(service, language="ruby", code="puts 1") == "approval_required"
    # ... and with approval switched off the language, code and policy checks answer.
    service._require_approval = False
    with pytest.raises(UnknownLanguage):
        sync(service.run(None, expected=RunOptions(language="ruby", code="puts 1")))
    with pytest.raises(EmptyCode):
        sync(service.run(None, expected=RunOptions(language="python", code="   ")))
    with pytest.raises(InvalidRequest):
        sync(
            service.run(
                None, expected=RunOptions(language="python", code="print(1)", timeout_sec=601)
            )
        )
    with pytest.raises(PolicyViolation):
        sync(service.run(None, expected=RunOptions(language="sh", code="rm -rf /")))
    assert (
        sync(service.run(None, expected=RunOptions(language="python", code="print(1)"))).stdout
        == "1\n"
    )


def test_require_approval_env_switch(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITPILOT_SANDBOX_REQUIRE_APPROVAL", "0")
    assert service.require_approval is False
    assert sync(service.status())["require_approval"] is False
    assert (
        sync(service.run(None, expected=RunOptions(language="python", code="print(1)"))).stdout
        == "1\n"
    )


def test_file_plan_reads_under_root_only(service: SandboxService, tmp_path: Path) -> None:
    (tmp_path / "demo.py").write_text("print('from file')\n")
    plan = sync(service.plan(RunOptions(file="demo.py")))
    assert plan.spec.language == "python" and plan.spec.code == "print('from file')\n"
    assert plan.source == "file_run" and plan.goal == "Run demo.py"
    outside = tmp_path.parent / "outside.py"
    outside.write_text("print(1)")
    for path in ("../outside.py", str(outside), "sub/../../outside.py", "missing.py"):
        with pytest.raises(FileAccessError):
            sync(service.plan(RunOptions(file=path)))


@pytest.mark.usefixtures("allow_off")
def test_default_backend_and_env_resolution(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert sync(service.plan(RunOptions(language="python", code="1"))).spec.backend == "subprocess"
    with pytest.raises(ConfirmationRequired):  # the user never said yes: nothing saved
        sync(service.configure({"backend": "off"}))
    assert sync(service.plan(RunOptions(language="python", code="1"))).spec.backend == "subprocess"
    sync(service.configure({"backend": "off"}, confirm=True))
    assert sync(service.plan(RunOptions(language="python", code="1"))).spec.backend == "off"
    monkeypatch.setenv("GITPILOT_SANDBOX", "subprocess")
    assert sync(service.plan(RunOptions(language="python", code="1"))).spec.backend == "subprocess"
    assert (
        sync(service.plan(RunOptions(language="python", code="1", backend="off"))).spec.backend
        == "off"
    )
    status = sync(service.status())
    assert status["env_override"] == "GITPILOT_SANDBOX" and status["backend"] == "subprocess"


def test_a_plan_rebuilt_from_its_json_shows_the_same_run_and_digest(
    service: SandboxService,
) -> None:
    service.policy = dataclasses.replace(service.policy, caller_vars=frozenset({"HOME"}))
    options = RunOptions(language="py", code="print(input())", stdin="secret", env=["HOME"])
    plan = sync(service.plan(options))
    shown = plan.to_dict()
    assert "stdin" not in shown and shown["env"] == ["HOME"] and shown["language"] == "python"
    again = ExecutionPlan.from_dict(shown)
    assert again.to_dict() == shown
    # The digest is the server's (over the stdin the JSON does not carry), not recomputed.
    assert again.digest == plan.digest == plan.spec.digest != again.spec.digest
    assert again.spec.stdin is None and plan.spec.stdin == "secret"
