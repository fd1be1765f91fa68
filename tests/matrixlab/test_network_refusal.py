"""Network on is refused on the matrixlab backend unless the administrator says the Runner
isolates it: the Runner's ``allow_network`` shares Docker's bridge (the host, other containers,
the Runner's own API)."""

from __future__ import annotations

from pathlib import Path

import pytest
from traitlets import TraitError

from gitpilot_jupyter.sandbox.diagnostics import render_text, run_diagnostics
from gitpilot_jupyter.sandbox.diagnostics.runner import network_on_stage
from gitpilot_jupyter.sandbox.errors import ContainmentUnavailable, InvalidSetting
from gitpilot_jupyter.sandbox.matrixlab.config import LifecycleConfig
from gitpilot_jupyter.sandbox.report import status_text
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from gitpilot_jupyter.server.app import SandboxApp
from tests.matrixlab.conftest import sent_requests
from tests.support.standin_fixture import StandinRunner

NETWORK_ON = RunOptions(
    language="python", code="print('hi')", allow_network=True, backend="matrixlab"
)


async def test_network_on_is_refused_in_the_plan_with_the_reason(
    matrixlab_service: SandboxService, runner_standin: StandinRunner
) -> None:
    before = len(sent_requests(runner_standin))
    with pytest.raises(ContainmentUnavailable) as refused:
        await matrixlab_service.plan(NETWORK_ON)
    assert refused.value.code == "network_unavailable" and refused.value.status == 409
    message = refused.value.message
    assert "Runner's own API" in message and "matrixlab_network_isolated" in message
    # Network off still plans, and the refusal sent nothing to the Runner.
    plan = await matrixlab_service.plan(NETWORK_ON.but(allow_network=False))
    assert plan.spec.backend == "matrixlab"
    assert len(sent_requests(runner_standin)) == before


async def test_status_and_debug_say_network_on_is_refused_as_the_plan_does(
    matrixlab_service: SandboxService,
) -> None:
    with pytest.raises(ContainmentUnavailable) as refused:
        await matrixlab_service.plan(NETWORK_ON)
    matrixlab_service.settings.update({"backend": "matrixlab"})
    status = await matrixlab_service.status()
    assert status["ok"] and status["network_on"] == refused.value.message
    assert f"\nnetwork on       {refused.value.message}\n" in status_text(status)
    stages = await run_diagnostics(matrixlab_service, matrixlab=True)
    assert f"SKIP  runner network-on  {refused.value.message}\n" in render_text(stages[-1:])
    # With every run network-on, every run is refused: the backend is not OK.
    matrixlab_service.settings.update({"allow_network": True})
    status = await matrixlab_service.status()
    assert not status["ok"] and status["error"] == refused.value.message
    assert status["network_on"] is None


@pytest.mark.parametrize("how", ["trait", "env"])
async def test_an_administrator_who_isolated_the_runner_allows_network_on(
    how: str, runner_standin: StandinRunner, sandbox_config_dir: Path, tmp_path: Path
) -> None:
    environ = {"GITPILOT_MATRIXLAB_NETWORK_ISOLATED": "1"} if how == "env" else {}
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir, environ=environ),
        root_dir=tmp_path,
        lifecycle_config=LifecycleConfig(network_isolated=how == "trait"),
    )
    service.settings.update(
        {
            "backend": "matrixlab",
            "matrixlab_url": runner_standin.url,
            "matrixlab_token": runner_standin.token,
        }
    )
    status = await service.status()
    assert status["ok"] and status["network_on"] is None
    assert "network on" not in status_text(status)
    assert network_on_stage(service).status == "PASS"
    plan = await service.plan(NETWORK_ON)
    approval = await service.approve(plan.plan_id)
    result = await service.run(approval["approval_token"], expected=NETWORK_ON)
    assert result.exit_code == 0 and result.stdout == "hi\n"
    body = sent_requests(runner_standin)[-1]["body"]
    assert isinstance(body, dict) and body["allow_network"] is True


def test_the_env_flag_and_the_workspace_cap_are_checked() -> None:
    with pytest.raises(InvalidSetting, match="NETWORK_ISOLATED"):
        LifecycleConfig().with_env({"GITPILOT_MATRIXLAB_NETWORK_ISOLATED": "maybe"})
    with pytest.raises(InvalidSetting, match="1 to 500"):
        LifecycleConfig().with_env({"GITPILOT_MATRIXLAB_MAX_WORKSPACE_MB": "501"})
    config = LifecycleConfig().with_env({"GITPILOT_MATRIXLAB_MAX_WORKSPACE_MB": "2"})
    assert config.max_workspace_mb == 2


def test_the_server_traits_reach_the_runner_host_config() -> None:
    app = SandboxApp()
    app.matrixlab_network_isolated = True
    app.matrixlab_max_workspace_mb = 20
    config = app.build_lifecycle_config()
    assert (config.network_isolated, config.max_workspace_mb) == (True, 20)
    app.matrixlab_max_workspace_mb = 501
    with pytest.raises(TraitError, match="1 to 500"):
        app.build_lifecycle_config()
