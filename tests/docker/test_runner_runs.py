"""Runs in real containers on the Docker engine, made as Runner 0.1.0 makes them.

The stand-in runs with ``--docker-image``: each run is a ``mlab-<job>-command-<hex>``
container of the test image (python3 only, no ``python``), with the request's env only
in its command, as the real Runner does. Stop must remove that container, an OOM kill
must read as the local backend's, and an image without the interpreter must say so.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.errors import BackendFailure
from gitpilot_jupyter.sandbox.matrixlab.backend import MatrixLabSandbox
from gitpilot_jupyter.sandbox.matrixlab.stopping import RUN_TAG_ENV, RUNNER_CONTAINER_PREFIX
from gitpilot_jupyter.sandbox.results import MEMORY_EXCEEDED
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.service.planner import HOME_AND_SECRETS
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.docker.conftest import BASE_IMAGE
from tests.support.runs import run_here
from tests.support.standin_fixture import StandinRunner, StartStandin

pytestmark = pytest.mark.docker

SLEEPER = "echo started; sleep 60; echo never"


@pytest.fixture
def container_runner(
    docker_engine: Any, test_images: None, start_standin: StartStandin
) -> StandinRunner:
    return start_standin(token="docker-runs", args=["--docker-image", BASE_IMAGE])


@pytest.fixture
def runs_service(
    container_runner: StandinRunner, sandbox_config_dir: Path, tmp_path: Path
) -> SandboxService:
    service = SandboxService(settings=SettingsStore(sandbox_config_dir), root_dir=tmp_path)
    service.settings.update(
        {"matrixlab_url": container_runner.url, "matrixlab_token": container_runner.token}
    )
    return service


def run_containers(engine: Any) -> list[Any]:
    """The Runner's run containers on the engine that carry a run tag of ours."""
    found = engine.api.containers(all=True, filters={"name": RUNNER_CONTAINER_PREFIX})
    return [c for c in found if RUN_TAG_ENV in str(c.get("Command"))]


async def sleeper_under_way(
    engine: Any, service: SandboxService, run_id: str
) -> tuple[asyncio.Future[Any], str]:
    """A run of :data:`SLEEPER` through the service, and its container's id once it runs."""
    running = asyncio.ensure_future(
        run_here(service, language="bash", code=SLEEPER, backend="matrixlab", run_id=run_id)
    )
    return running, await started(engine, service, run_id)


async def started(engine: Any, service: SandboxService, run_id: str) -> str:
    """The id of the run's container once it is running."""
    for _ in range(300):
        if run_id in service.executor.active_runs():
            running = [c for c in run_containers(engine) if c["State"] == "running"]
            if running:
                return str(running[0]["Id"])
        await asyncio.sleep(0.05)
    raise AssertionError("the run's container never ran")


async def gone_within(engine: Any, container_id: str, seconds: float) -> float:
    """Seconds until the container is no longer on the engine (fails past ``seconds``)."""
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        if not engine.api.containers(all=True, filters={"id": container_id}):
            return time.monotonic() - began
        await asyncio.sleep(0.02)
    raise AssertionError(f"container {container_id[:12]} still there after {seconds} s")


async def test_stop_removes_the_runs_container_and_keeps_the_envelope(
    docker_engine: Any, runs_service: SandboxService
) -> None:
    run_id = "run_" + "a" * 16
    running, container = await sleeper_under_way(docker_engine, runs_service, run_id)
    await asyncio.sleep(0.3)  # "started" is written
    asked = time.monotonic()
    runs_service.cancel(run_id)
    took = await gone_within(docker_engine, container, 2.0)
    plan, result = await asyncio.wait_for(running, 10)
    answered = time.monotonic() - asked
    assert result.cancelled and result.exit_code == -1 and not result.timed_out
    # The envelope keeps what the backend knows: its command, notes and the Runner's id.
    assert result.command == plan.command == ["bash", "/workspace/main.sh"]
    assert any(note.startswith("no file-size limit") for note in result.notes)
    assert result.sandbox_id is not None and result.stdout == "started\n"
    assert took < 2 and answered < 5, (took, answered)
    assert run_containers(docker_engine) == []


async def test_a_caller_that_gives_up_takes_the_container_with_it(
    docker_engine: Any, runs_service: SandboxService
) -> None:
    run_id = "run_" + "b" * 16
    running, container = await sleeper_under_way(docker_engine, runs_service, run_id)
    running.cancel()  # an interrupted cell
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, 10)
    await gone_within(docker_engine, container, 2.0)


async def test_an_oom_kill_says_memory_limit_exceeded(container_runner: StandinRunner) -> None:
    backend = MatrixLabSandbox(url=container_runner.url, token=container_runner.token)
    code = "exec python3 -c 'a = bytearray(600 * 1024 * 1024); print(len(a))'"
    request = RunRequest(
        language="bash", code=code, timeout_sec=20, limits=ResourceLimits(memory_mb=128)
    )
    result = await backend.run(request)
    # What the local backend answers for a run its memory limit killed.
    assert (result.exit_code, result.timed_out, result.stdout) == (137, False, "")
    assert result.stderr == MEMORY_EXCEEDED
    killed_by_hand = await backend.run(
        RunRequest(language="bash", code="kill -9 $$", timeout_sec=20)
    )
    assert killed_by_hand.exit_code == 137 and "memory" not in killed_by_hand.stderr


async def test_an_image_without_the_interpreter_says_what_is_missing(
    container_runner: StandinRunner,
) -> None:
    backend = MatrixLabSandbox(url=container_runner.url, token=container_runner.token)
    with pytest.raises(BackendFailure) as caught:
        await backend.run(RunRequest(language="python", code="print(1)", timeout_sec=10))
    assert caught.value.status == 502 and "its image has no `python` command" in str(caught.value)


async def test_a_container_run_cannot_see_the_home_folder_the_plan_says_it_cannot(
    runs_service: SandboxService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("PRIVATE KEY")
    monkeypatch.setenv("HOME", str(home))
    key = home / ".ssh" / "id_ed25519"
    code = f"cat {key} 2>/dev/null || echo unreadable; ls {home} 2>/dev/null || echo no-home"
    plan, result = await run_here(runs_service, language="bash", code=code, backend="matrixlab")
    assert {"label": f"{HOME_AND_SECRETS} not in the run's container", "ok": True} in plan.checks
    assert result.exit_code == 0 and result.stdout == "unreadable\nno-home\n", result.stderr
