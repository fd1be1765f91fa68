"""Lifecycle refusals that need no Docker engine: the flag gate and an engine that is not there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.errors import DockerUnavailable, InvalidRequest, LifecycleDisabled
from gitpilot_jupyter.sandbox.matrixlab.config import LifecycleConfig
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.unit.test_cli import cli


@pytest.mark.parametrize("action", ["install", "start", "stop"])
async def test_mutating_calls_need_the_flag(service: SandboxService, action: str) -> None:
    with pytest.raises(LifecycleDisabled) as caught:
        await service.matrixlab.lifecycle(action)
    assert caught.value.status == 403
    assert "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1" in caught.value.message


async def test_no_docker_engine_is_503_and_status_says_so(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    with pytest.raises(DockerUnavailable) as caught:
        await service.matrixlab.lifecycle("start")
    assert caught.value.status == 503 and "no Docker engine answers" in caught.value.message
    status = await service.matrixlab.lifecycle("status")
    assert status["docker_available"] is False and status["lifecycle_enabled"] is True
    assert status["running"] is False and "no Docker engine" in status["docker_error"]
    assert any(
        line.startswith("docker run -d --name gitpilot-matrixlab")
        for line in status["instructions"]
    )


async def test_config_comes_from_server_config_then_env(
    sandbox_config_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    service = SandboxService(
        lifecycle_config=LifecycleConfig(container_name="from-config", runner_image="my/runner:1")
    )
    status = await service.matrixlab.lifecycle("status")
    assert (status["container_name"], status["runner_image"]) == ("from-config", "my/runner:1")
    assert status["host_port"] == 8765 and status["jobs_dir"].startswith(str(sandbox_config_dir))
    monkeypatch.setenv("GITPILOT_MATRIXLAB_CONTAINER", "from-env")
    monkeypatch.setenv("GITPILOT_MATRIXLAB_PORT", "9999")
    status = await service.matrixlab.lifecycle("status")
    assert (status["container_name"], status["runner_image"]) == ("from-env", "my/runner:1")
    assert "-p 127.0.0.1:9999:8000" in " ".join(status["instructions"])


async def test_an_unknown_action_is_a_clear_error(service: SandboxService) -> None:
    with pytest.raises(InvalidRequest, match="unknown lifecycle action 'restart'"):
        await service.matrixlab.lifecycle("restart")


def test_cli_refusal_names_the_flag_and_status_needs_none() -> None:
    refused = cli("matrixlab", "start")
    assert refused.returncode == 2 and "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1" in refused.stderr
    status = cli("matrixlab", "status", "--json")
    assert status.returncode == 0
    assert json.loads(status.stdout)["lifecycle_enabled"] is False
