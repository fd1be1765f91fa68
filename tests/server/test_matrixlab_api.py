"""REST: matrixlab Test connection and lifecycle routes on a real server (OpenAPI-checked)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.docker.conftest import (  # noqa: F401 - fixtures
    RUNNER_IMAGE,
    docker_engine,
    test_images,
)
from tests.support.live_server import free_port
from tests.support.standin_fixture import StandinRunner

from .helpers import Api, approved_run

TEST = "api/sandbox/matrixlab/test"
LIFECYCLE = "api/sandbox/matrixlab/lifecycle"


async def test_connection_with_unsaved_values(
    api: Api,
    runner_standin: StandinRunner,
) -> None:
    body = {"matrixlab_url": runner_standin.url, "matrixlab_token": runner_standin.token}
    answer = await api("POST", TEST, body)
    assert answer.code == 200, answer.text
    assert answer.body["ok"] is True and answer.body["version"] == "0.1.0"
    assert answer.body["code_run"] is True and answer.body["workspace_run"] is True
    assert runner_standin.token not in answer.text
    config = await api("GET", "api/sandbox/config")
    assert config.body["has_token"] is False and config.body["matrixlab_url"] != runner_standin.url

    wrong = await api("POST", TEST, {"matrixlab_url": runner_standin.url, "matrixlab_token": "x"})
    assert wrong.code == 200 and wrong.body["ok"] is False
    assert "MATRIXLAB_BEARER_TOKEN" in wrong.body["hint"]


async def test_connection_with_a_bad_url_is_400(api: Api) -> None:
    answer = await api("POST", TEST, {"matrixlab_url": "ftp://runner"})
    assert answer.code == 400 and answer.body["code"] == "invalid_setting"


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Point the Docker SDK at a socket where no engine answers."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")


async def test_lifecycle_status_is_safe_without_docker(api: Api, no_docker: None) -> None:
    answer = await api("GET", LIFECYCLE)
    assert answer.code == 200, answer.text
    body = answer.body
    assert body["docker_available"] is False and body["lifecycle_enabled"] is False
    assert body["running"] is False and body["installed"] is False
    assert any(line.startswith("docker pull ") for line in body["instructions"])


@pytest.mark.parametrize("action", ["install", "start", "stop"])
async def test_actions_without_the_flag_are_403_naming_it(api: Api, action: str) -> None:
    answer = await api("POST", f"api/sandbox/matrixlab/{action}")
    assert (answer.code, answer.body["code"]) == (403, "lifecycle_disabled")
    assert "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE" in answer.body["message"]


async def test_actions_without_docker_are_503(
    api: Api, no_docker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    answer = await api("POST", "api/sandbox/matrixlab/start")
    assert (answer.code, answer.body["code"]) == (503, "docker_unavailable")


@pytest.mark.docker
async def test_start_run_stop_over_rest_on_real_docker(
    api: Api,
    docker_engine: Any,  # noqa: F811
    test_images: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    name = "gitpilot-test-" + secrets.token_hex(4)
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    monkeypatch.setenv("GITPILOT_MATRIXLAB_RUNNER_IMAGE", RUNNER_IMAGE)
    monkeypatch.setenv("GITPILOT_MATRIXLAB_CONTAINER", name)
    monkeypatch.setenv("GITPILOT_MATRIXLAB_JOBS_DIR", str(tmp_path / "jobs"))
    url = f"http://127.0.0.1:{free_port()}"
    saved = await api("PUT", "api/sandbox/config", {"matrixlab_url": url})
    assert saved.code == 200, saved.text
    try:
        started = await api("POST", "api/sandbox/matrixlab/start")
        assert started.code == 200 and started.body["ok"] is True, started.text
        assert started.body["steps"][0]["cmd"].startswith(f"docker run -d --name {name}")
        result = await approved_run(
            api, "python", "print('via the container')", backend="matrixlab"
        )
        assert result.code == 200, result.text
        assert result.body["stdout"] == "via the container\n" and result.body["sandbox_id"]
        stopped = await api("POST", "api/sandbox/matrixlab/stop")
        assert stopped.code == 200 and stopped.body["ok"] is True
        status = await api("GET", LIFECYCLE)
        assert status.body["running"] is False and status.body["installed"] is True
    finally:
        for container in docker_engine.containers.list(all=True, filters={"name": name}):
            container.remove(force=True)
