"""The Runner lifecycle on a real Docker engine, with the stand-in image as the Runner."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import pytest

from gitpilot_jupyter.sandbox.service import SandboxService
from tests.docker.conftest import BASE_IMAGE, RUNNER_IMAGE
from tests.unit.test_cli import cli

pytestmark = pytest.mark.docker
T = TypeVar("T")


async def without_blocking_the_loop(call: Awaitable[T]) -> tuple[T, float]:
    """Await ``call`` while a ticker runs; also return the longest gap between its ticks."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    task = asyncio.ensure_future(ticker())
    try:
        value = await call
    finally:
        done.set()
        await task
    return value, max(gaps, default=0.0)


def commands(answer: dict[str, Any]) -> list[str]:
    return [step["cmd"] for step in answer["steps"]]


async def test_start_run_stop_start_again(lifecycle_service: SandboxService) -> None:
    service = lifecycle_service
    token = service.settings.effective().settings.matrixlab_token
    before = await service.lifecycle_status()
    assert before["docker_available"] is True and before["installed"] is True
    assert before["running"] is False and before["container"] is None

    started, gap = await without_blocking_the_loop(service.lifecycle_start())
    assert started["ok"] is True and started["running"] is True, started
    assert gap < 1.0, f"the event loop was blocked for {gap:.2f} s"
    run_line = commands(started)[0]
    assert run_line.startswith("docker run -d --name ") and "--restart unless-stopped" in run_line
    assert f"-p 127.0.0.1:{before['host_port']}:8000" in run_line
    assert "-v /var/run/docker.sock:/var/run/docker.sock" in run_line
    assert "MATRIXLAB_BEARER_TOKEN=***" in run_line and token not in json.dumps(started)
    container_id = started["container"]["id"]

    # The Runner in the container answers on the published port, with the saved token.
    _, result = await service.run_approved_here(
        language="python", code="print(6 * 7)", backend="matrixlab"
    )
    assert (result.exit_code, result.stdout, result.backend) == (0, "42\n", "matrixlab")
    assert result.sandbox_id

    again = await service.lifecycle_start()
    assert again["ok"] is True and again["container"]["id"] == container_id
    assert again["steps"][0]["stdout"] == "already running"

    stopped = await service.lifecycle_stop()
    assert stopped["ok"] is True and stopped["running"] is False
    assert stopped["container"]["state"] == "exited"
    assert commands(stopped) == [f"docker stop {before['container_name']}"]

    restarted = await service.lifecycle_start()
    assert restarted["ok"] is True and restarted["running"] is True
    assert commands(restarted)[0] == f"docker start {before['container_name']}"
    assert restarted["container"]["id"] == container_id


async def test_install_skips_present_images_and_reports_a_real_pull_failure(
    lifecycle_service: SandboxService, monkeypatch: Any
) -> None:
    missing = "gitpilot-test/does-not-exist:latest"
    monkeypatch.setenv("GITPILOT_MATRIXLAB_SANDBOX_IMAGES", f"{BASE_IMAGE},{missing}")
    events: list[dict[str, Any]] = []

    async def progress(event: dict[str, Any]) -> None:
        events.append(event)

    answer = await lifecycle_service.lifecycle_install(progress)
    assert answer["ok"] is False and missing in answer["error"]
    steps = {step["cmd"]: step for step in answer["steps"]}
    for image in (RUNNER_IMAGE, BASE_IMAGE):
        assert steps[f"docker image inspect {image}"]["exit_code"] == 0
        assert {"image": image, "status": "already present"} in events
    failed = steps[f"docker pull {missing}"]
    assert failed["exit_code"] == 1 and failed["stderr"]
    assert [i["present"] for i in answer["images"]] == [True, True, False]


async def test_start_without_the_runner_image_says_install_first(
    lifecycle_service: SandboxService, monkeypatch: Any
) -> None:
    monkeypatch.setenv("GITPILOT_MATRIXLAB_RUNNER_IMAGE", "gitpilot-test/not-installed:latest")
    answer = await lifecycle_service.lifecycle_start()
    assert answer["ok"] is False and "run install first" in answer["error"]
    assert answer["container"] is None and answer["installed"] is False


def test_cli_install_lists_its_steps(lifecycle_service: SandboxService) -> None:
    done = cli("matrixlab", "install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"$ docker image inspect {RUNNER_IMAGE}" in done.stdout
    assert "install: OK" in done.stdout and "already present" in done.stderr
