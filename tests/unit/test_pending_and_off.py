"""The core's rules for Pending Plans (who waits, when plans leave) and for backend ``off``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.errors import PlanNotFound
from gitpilot_jupyter.sandbox.local.off import OFF_HOME_CHECK, OFF_RISK, off_confirmation
from gitpilot_jupyter.sandbox.plans import PLAN_TTL_SEC, PlanStore
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore


def test_undecided_plans_expire_and_leave(sandbox_config_dir: Path) -> None:
    now = [1_000_000.0]
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir), plans=PlanStore(clock=lambda: now[0])
    )
    plan = asyncio.run(service.plan(RunOptions(language="python", code="print(1)"), agent=True))
    assert [p.plan_id for p in service.plans.waiting()] == [plan.plan_id]
    now[0] += PLAN_TTL_SEC - 1
    assert service.plans.waiting() != []
    now[0] += 2
    assert service.plans.waiting() == [] and service.plans.pending() == []
    with pytest.raises(PlanNotFound):
        asyncio.run(service.approve(plan.plan_id))


@pytest.mark.usefixtures("allow_off")
def test_every_off_plan_warns_and_never_says_network_disabled(sandbox_config_dir: Path) -> None:
    service = SandboxService(settings=SettingsStore(sandbox_config_dir))
    plan = asyncio.run(service.plan(RunOptions(language="python", code="print(1)", backend="off")))
    assert plan.high_risk
    assert {"severity": "high", "label": "no isolation", "detail": OFF_RISK.split(": ")[1]} in (
        plan.warnings
    )
    labels = [check["label"] for check in plan.checks]
    assert "network disabled" not in labels
    assert "network not blocked (pass-through: no sandbox)" in labels
    assert {"label": OFF_HOME_CHECK, "ok": False} in plan.checks  # never "hidden"
    assert plan.spec.network is True  # what the run really has
    local = asyncio.run(service.plan(RunOptions(language="python", code="print(1)")))
    assert not local.high_risk and "network disabled" in [c["label"] for c in local.checks]


def test_switching_to_off_needs_a_confirmation_once() -> None:
    question = off_confirmation({"backend": "off"}, "subprocess")
    assert question is not None and "No isolation: runs on the host as you" in question
    assert off_confirmation({"backend": "off"}, "off") is None  # already off
    assert off_confirmation({"timeout_sec": 30}, "subprocess") is None
    assert off_confirmation({"backend": "matrixlab"}, "subprocess") is None
