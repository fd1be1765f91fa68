"""The Runner lifecycle on a real Docker engine, with the stand-in image as the Runner."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.errors import BackendFailure
from gitpilot_jupyter.sandbox.matrixlab import jobs as jobs_module
from gitpilot_jupyter.sandbox.matrixlab.backend import MatrixLabSandbox
from gitpilot_jupyter.sandbox.matrixlab.config import JOBS_MAX_AGE_SEC, state_path
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.docker.conftest import BASE_IMAGE, RUNNER_IMAGE
from tests.support.live_server import free_port
from tests.support.runs import run_here
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
    before = await service.matrixlab.lifecycle("status")
    assert before["docker_available"] is True and before["installed"] is True
    assert before["running"] is False and before["container"] is None

    started, gap = await without_blocking_the_loop(service.matrixlab.lifecycle("start"))
    assert started["ok"] is True and started["running"] is True, started
    assert gap < 1.0, f"the event loop was blocked for {gap:.2f} s"
    run_line = commands(started)[0]
    assert run_line.startswith("docker run -d --name ") and "--restart unless-stopped" in run_line
    assert f"-p 127.0.0.1:{before['host_port']}:8000" in run_line
    assert "-v /var/run/docker.sock:/var/run/docker.sock" in run_line
    assert "MATRIXLAB_BEARER_TOKEN=***" in run_line and token not in json.dumps(started)
    container_id = started["container"]["id"]

    # The Runner in the container answers on the published port, with the saved token.
    _, result = await run_here(service, language="python", code="print(6 * 7)", backend="matrixlab")
    assert (result.exit_code, result.stdout, result.backend) == (0, "42\n", "matrixlab")
    assert result.sandbox_id

    again = await service.matrixlab.lifecycle("start")
    assert again["ok"] is True and again["container"]["id"] == container_id
    assert again["steps"][0]["stdout"] == "already running"

    stopped = await service.matrixlab.lifecycle("stop")
    assert stopped["ok"] is True and stopped["running"] is False
    assert stopped["container"]["state"] == "exited"
    assert commands(stopped)[0] == f"docker stop {before['container_name']}"
    assert commands(stopped)[1].startswith("find ") and "-name 'job-*'" in commands(stopped)[1]

    restarted = await service.matrixlab.lifecycle("start")
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

    answer = await lifecycle_service.matrixlab.lifecycle("install", progress)
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
    answer = await lifecycle_service.matrixlab.lifecycle("start")
    assert answer["ok"] is False and "run install first" in answer["error"]
    assert answer["container"] is None and answer["installed"] is False


def test_cli_install_lists_its_steps(lifecycle_service: SandboxService) -> None:
    done = cli("matrixlab", "install")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"$ docker image inspect {RUNNER_IMAGE}" in done.stdout
    assert "install: OK" in done.stdout and "already present" in done.stderr


def job_folders(service: SandboxService) -> list[Path]:
    jobs = Path(service.matrixlab._lifecycle().jobs_dir)
    return sorted(jobs.glob("job-*")) if jobs.is_dir() else []


async def test_old_job_folders_are_pruned_and_new_ones_kept(
    lifecycle_service: SandboxService,
) -> None:
    jobs = Path(lifecycle_service.matrixlab._lifecycle().jobs_dir)
    old, recent = jobs / "job-old-run", jobs / "job-recent-run"
    for folder in (old, recent):
        (folder / "ws").mkdir(parents=True)
        (folder / "ws" / "main.py").write_text("print(1)\n")
    long_ago = time.time() - 2 * JOBS_MAX_AGE_SEC  # twice the longest run
    os.utime(old, (long_ago, long_ago))
    started = await lifecycle_service.matrixlab.lifecycle("start")
    assert started["ok"] is True, started
    prune = started["steps"][-1]
    assert prune["cmd"].startswith(f"find {jobs} ")
    # The health check's own snippet (a run that prunes after itself) or this step took it.
    assert prune["stdout"] in (
        "removed 0 kept copies of old runs",
        "removed 1 kept copy of old runs",
    )
    assert not old.exists() and recent.exists()
    # The Runner leaves a job folder per run and deletes none: after each run the backend
    # removes the run's own and those older than the Runner's longest run.
    (old / "ws").mkdir(parents=True)
    os.utime(old, (long_ago, long_ago))
    before = set(job_folders(lifecycle_service))
    await run_here(lifecycle_service, language="python", code="print(1)", backend="matrixlab")
    after = set(job_folders(lifecycle_service))
    assert old not in after and recent in after
    assert after - before == set(), "the run's own job folder was kept"


async def test_a_non_default_socket_is_mounted_where_the_runner_looks(
    lifecycle_service: SandboxService,
    docker_engine: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    socket = tmp_path / "engine.sock"
    socket.symlink_to("/var/run/docker.sock")
    monkeypatch.setenv("GITPILOT_MATRIXLAB_DOCKER_SOCKET", str(socket))
    started = await lifecycle_service.matrixlab.lifecycle("start")
    # The stand-in image, like the real Runner, will not start without /var/run/docker.sock.
    assert started["ok"] is True and started["running"] is True, started
    assert f"-v {socket}:/var/run/docker.sock" in commands(started)[0]
    mounts = docker_engine.containers.get(started["container_name"]).attrs["Mounts"]
    sources = {m["Source"] for m in mounts if m["Destination"] == "/var/run/docker.sock"}
    assert sources & {str(socket), "/var/run/docker.sock", os.path.realpath(socket)}


async def test_a_missing_socket_is_refused_before_any_container(
    lifecycle_service: SandboxService, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("GITPILOT_MATRIXLAB_DOCKER_SOCKET", str(tmp_path / "nothing.sock"))
    answer = await lifecycle_service.matrixlab.lifecycle("start")
    assert answer["ok"] is False and "GITPILOT_MATRIXLAB_DOCKER_SOCKET" in answer["error"]
    assert answer["container"] is None


async def test_a_runner_that_crashes_at_start_is_removed_not_left_restarting(
    lifecycle_service: SandboxService, docker_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The base image's command exits at once: a crash loop under --restart unless-stopped.
    monkeypatch.setenv("GITPILOT_MATRIXLAB_RUNNER_IMAGE", BASE_IMAGE)
    began = time.monotonic()
    answer = await lifecycle_service.matrixlab.lifecycle("start")
    assert answer["ok"] is False and "did not become healthy" in answer["error"]
    assert time.monotonic() - began < 20, "it waited for a container that had crashed"
    assert commands(answer)[-1] == f"docker rm -f {answer['container_name']}"
    assert answer["container"] is None
    import docker.errors

    with pytest.raises(docker.errors.NotFound):
        docker_engine.containers.get(answer["container_name"])


async def test_start_waits_on_the_published_port_and_says_the_url_differs(
    lifecycle_service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv("GITPILOT_MATRIXLAB_PORT", str(port))
    started = await lifecycle_service.matrixlab.lifecycle("start")
    assert started["ok"] is True, started
    health = next(s for s in started["steps"] if s["cmd"].startswith("curl "))
    assert health["cmd"] == f"curl -fsS http://127.0.0.1:{port}/health"
    assert f"set matrixlab_url to http://127.0.0.1:{port}" in started["warning"]


async def test_status_of_a_running_runner_with_a_wrong_token_says_so(
    lifecycle_service: SandboxService,
) -> None:
    started = await lifecycle_service.matrixlab.lifecycle("start")
    assert started["ok"] is True, started
    lifecycle_service.settings.update(
        {"matrixlab_token": "not-the-runners", "backend": "matrixlab"}
    )
    status = await lifecycle_service.matrixlab.lifecycle("status")
    assert status["running"] is True
    assert "rejected the token (401)" in status["health_error"]
    assert (await lifecycle_service.status())["ok"] is False


def unauthenticated_run(url: str) -> int:
    """The status of a run sent to the Runner at ``url`` without a token."""
    body = {"language": "python", "code": "print(1)"}
    return httpx.post(url + "/code/run", json=body, timeout=30).status_code


async def test_start_without_a_token_makes_and_saves_one(
    lifecycle_service: SandboxService, sandbox_config_dir: Path
) -> None:
    service = lifecycle_service
    service.settings.update({"matrixlab_token": ""})
    started = await service.matrixlab.lifecycle("start")
    assert started["ok"] is True, started
    token = service.settings.effective().settings.matrixlab_token
    assert len(token) >= 40, "no token was made"
    assert commands(started)[0] == "jupyter sandbox config --set matrixlab_token=***"
    assert token not in json.dumps(started)
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())["sandbox"]
    assert saved["matrixlab_token"] == token
    assert service.config()["has_token"] is True and token not in json.dumps(service.config())
    # The Runner is not open: a run without the token is refused, ours runs.
    assert unauthenticated_run(started["url"]) == 401
    _, result = await run_here(service, language="python", code="print(6 * 7)", backend="matrixlab")
    assert result.stdout == "42\n"


async def test_a_changed_token_recreates_the_container_at_once(
    lifecycle_service: SandboxService,
) -> None:
    service = lifecycle_service
    first = await service.matrixlab.lifecycle("start")
    assert first["ok"] is True, first
    old_token = service.settings.effective().settings.matrixlab_token
    service.settings.update({"matrixlab_token": "changed-" + old_token})
    assert (await service.matrixlab.lifecycle("status"))["container"]["stale"] == [
        "its bearer token is not the saved matrixlab_token"
    ]
    began = time.monotonic()
    again = await service.matrixlab.lifecycle("start")
    took = time.monotonic() - began
    assert again["ok"] is True and again["running"] is True, again
    assert took < 15, f"start took {took:.1f} s"
    assert again["container"]["id"] != first["container"]["id"]
    assert again["container"]["stale"] == []
    replaced = again["steps"][0]
    assert replaced["cmd"] == f"docker rm -f {first['container_name']}"
    assert "token is not the saved" in replaced["stdout"] and old_token not in json.dumps(again)
    _, result = await run_here(service, language="python", code="print('new')", backend="matrixlab")
    assert result.stdout == "new\n"
    stale = MatrixLabSandbox(url=again["url"], token=old_token)
    with pytest.raises(BackendFailure, match="401"):
        await stale.run(RunRequest(language="python", code="print(1)", timeout_sec=10))


async def test_an_open_runner_left_by_an_earlier_start_is_replaced(
    lifecycle_service: SandboxService, docker_engine: Any
) -> None:
    """A container created without a token (as an older version did) is not reused."""
    service = lifecycle_service
    status = await service.matrixlab.lifecycle("status")
    jobs = status["jobs_dir"]
    Path(jobs).mkdir(parents=True, exist_ok=True)
    docker_engine.containers.run(
        RUNNER_IMAGE,
        name=status["container_name"],
        detach=True,
        ports={"8000/tcp": ("127.0.0.1", status["host_port"])},
        volumes={
            jobs: {"bind": jobs, "mode": "rw"},
            "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
        },
        environment={"MATRIXLAB_LOCAL_JOBS_DIR": jobs, "MATRIXLAB_HOST_JOBS_DIR": jobs},
        labels={"org.gitpilot.managed-by": "gitpilot-jupyter"},
    )
    stale = (await service.matrixlab.lifecycle("status"))["container"]["stale"]
    assert stale == [
        "it runs without a bearer token (open to anyone who reaches it)",
        f"its MATRIXLAB_STATE_DIR is not {state_path(jobs)}",
    ]
    started = await service.matrixlab.lifecycle("start")
    assert started["ok"] is True, started
    assert unauthenticated_run(started["url"]) == 401


async def test_a_runner_that_keeps_its_copies_elsewhere_is_replaced_and_keeps_nothing(
    lifecycle_service: SandboxService, docker_engine: Any
) -> None:
    """A container made before the state folder moved into the jobs folder (the Runner's
    copies in /app/runner_state, out of reach) is recreated; then every run's copies go."""
    service = lifecycle_service
    status = await service.matrixlab.lifecycle("status")
    jobs = status["jobs_dir"]
    Path(jobs).mkdir(parents=True, exist_ok=True)
    token = service.settings.effective().settings.matrixlab_token
    docker_engine.containers.run(
        RUNNER_IMAGE,
        name=status["container_name"],
        detach=True,
        ports={"8000/tcp": ("127.0.0.1", status["host_port"])},
        volumes={
            jobs: {"bind": jobs, "mode": "rw"},
            "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
        },
        environment={
            "MATRIXLAB_LOCAL_JOBS_DIR": jobs,
            "MATRIXLAB_HOST_JOBS_DIR": jobs,
            "MATRIXLAB_BEARER_TOKEN": token,
        },
        labels={"org.gitpilot.managed-by": "gitpilot-jupyter"},
    )
    state = state_path(jobs)
    stale = (await service.matrixlab.lifecycle("status"))["container"]["stale"]
    assert stale == [f"its MATRIXLAB_STATE_DIR is not {state}"]
    started = await service.matrixlab.lifecycle("start")
    assert started["ok"] is True and started["container"]["stale"] == [], started
    assert f"-e MATRIXLAB_STATE_DIR={state}" in commands(started)[1]
    secret = "planted-secret-5e1"
    code = f"import sys; print({secret!r}, sys.stdin.read())"
    _, result = await run_here(
        service, language="python", code=code, stdin="stdin-secret", backend="matrixlab"
    )
    assert result.stdout == f"{secret} stdin-secret\n", result.stderr
    # The Runner (as root in its container) wrote a seed and a run record: both went.
    left = [p for p in Path(state).rglob("*") if p.is_file()]
    assert [p for p in left if secret in p.read_text(errors="replace")] == [], left
    assert not list(Path(jobs).glob("job-*"))


async def test_a_changed_runner_image_recreates_the_container(
    lifecycle_service: SandboxService, docker_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await lifecycle_service.matrixlab.lifecycle("start")
    assert first["ok"] is True, first
    retagged = f"gitpilot-test/matrixlab-runner-standin:{first['container_name']}"
    docker_engine.images.get(RUNNER_IMAGE).tag(retagged)
    try:
        monkeypatch.setenv("GITPILOT_MATRIXLAB_RUNNER_IMAGE", retagged)
        again = await lifecycle_service.matrixlab.lifecycle("start")
        assert again["ok"] is True, again
        assert again["container"]["image"] == retagged
        assert again["container"]["id"] != first["container"]["id"]
        assert f"it runs the image {RUNNER_IMAGE}, not {retagged}" in again["steps"][0]["stdout"]
    finally:
        with contextlib.suppress(Exception):
            docker_engine.containers.get(first["container_name"]).remove(force=True)
        docker_engine.images.remove(retagged)


async def test_a_container_gitpilot_did_not_create_is_left_alone(
    lifecycle_service: SandboxService, docker_engine: Any
) -> None:
    status = await lifecycle_service.matrixlab.lifecycle("status")
    other = docker_engine.containers.create(BASE_IMAGE, name=status["container_name"])
    answer = await lifecycle_service.matrixlab.lifecycle("start")
    assert answer["ok"] is False and "did not create" in answer["error"]
    assert docker_engine.containers.get(status["container_name"]).id == other.id


def test_cli_start_passes_on_the_port_mismatch_warning(
    lifecycle_service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv("GITPILOT_MATRIXLAB_PORT", str(port))
    done = cli("matrixlab", "start")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"warning: the Runner answers at http://127.0.0.1:{port}" in done.stdout
    assert f"set matrixlab_url to http://127.0.0.1:{port}" in done.stdout


async def test_copies_the_server_may_not_remove_go_through_the_runners_container(
    lifecycle_service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Runner writes its copies as root; a server that may not remove them (here:
    every removal refused, as for a server that is not root) has the Runner do it."""
    started = await lifecycle_service.matrixlab.lifecycle("start")
    assert started["ok"] is True, started
    jobs = started["jobs_dir"]
    seed = Path(state_path(jobs)) / "seeds" / "seed_old"
    seed.mkdir(parents=True)
    (seed / "main.py").write_text("print('old')\n")
    long_ago = time.time() - 2 * JOBS_MAX_AGE_SEC
    os.utime(seed, (long_ago, long_ago))

    def refused(path: str, *args: Any, **kwargs: Any) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(jobs_module.shutil, "rmtree", refused)
    assert jobs_module.prune_job_folders(jobs) == (0, [f"{seed}: Permission denied"])
    assert seed.exists()
    name = started["container_name"]
    assert jobs_module.prune_job_folders(jobs, container=name) == (1, [])
    assert not seed.exists()
