"""Lifecycle actions answered as NDJSON: install reports each image as it goes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.docker.conftest import (  # noqa: F401 - fixtures
    BASE_IMAGE,
    RUNNER_IMAGE,
    docker_engine,
    test_images,
)

from .helpers import NDJSON, Api, check_stream_line

INSTALL = "api/sandbox/matrixlab/install"


async def test_streamed_install_without_the_flag_is_a_plain_403(api: Api) -> None:
    answer = await api("POST", INSTALL, headers={"Accept": NDJSON})
    assert (answer.code, answer.body["code"]) == (403, "lifecycle_disabled")
    assert answer.headers["Content-Type"].startswith("application/json")


async def test_streamed_install_without_docker_is_a_plain_503(
    api: Api, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    answer = await api("POST", INSTALL, headers={"Accept": NDJSON})
    assert (answer.code, answer.body["code"]) == (503, "docker_unavailable")


@pytest.mark.docker
async def test_install_streams_progress_then_the_result(
    api: Api,
    docker_engine: Any,  # noqa: F811
    test_images: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    monkeypatch.setenv("GITPILOT_MATRIXLAB_RUNNER_IMAGE", RUNNER_IMAGE)
    monkeypatch.setenv("GITPILOT_MATRIXLAB_SANDBOX_IMAGES", BASE_IMAGE)
    answer = await api("POST", INSTALL, headers={"Accept": NDJSON})
    assert answer.code == 200, answer.text
    lines = answer.body
    for line in lines:
        check_stream_line(line, "LifecycleResult")
    progress = [line for line in lines if line["type"] == "progress"]
    assert {line["image"] for line in progress} == {RUNNER_IMAGE, BASE_IMAGE}
    assert all(line["status"] == "already present" for line in progress)
    result = lines[-1]
    assert result["type"] == "result" and result["ok"] is True
    assert [step["cmd"].split()[:3] for step in result["steps"]] == [
        ["docker", "image", "inspect"]
    ] * 2
