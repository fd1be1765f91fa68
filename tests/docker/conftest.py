"""Real Docker: an engine, the locally built test images, a Runner container removed at teardown.

Images come from ``scripts/build-test-images.sh`` (no Docker Hub); the engine from
``scripts/start-dockerd.sh``. Without them these tests skip, except in CI where they fail.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.support.live_server import free_port
from tests.support.system import require_system

RUNNER_IMAGE = "gitpilot-test/matrixlab-runner-standin:latest"
BASE_IMAGE = "gitpilot-test/bookworm-python:latest"


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[Any]:
    """A connected Docker SDK client (skip / CI failure when no engine answers)."""
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        require_system(
            "docker", False, f"no Docker engine answers ({exc}); scripts/start-dockerd.sh"
        )
        raise
    yield client
    client.close()


@pytest.fixture(scope="session")
def test_images(docker_engine: Any) -> None:
    """The locally built images the lifecycle uses."""
    import docker.errors

    for image in (RUNNER_IMAGE, BASE_IMAGE):
        try:
            docker_engine.images.get(image)
        except docker.errors.ImageNotFound:
            require_system(
                "docker test images", False, f"{image} is missing; run scripts/build-test-images.sh"
            )


@pytest.fixture
def lifecycle_service(
    docker_engine: Any,
    test_images: None,
    sandbox_config_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[SandboxService]:
    """A service whose lifecycle runs the stand-in image as the Runner, on a private name and port.

    The container is removed at teardown, whatever the test did.
    """
    name = "gitpilot-test-" + secrets.token_hex(4)
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    monkeypatch.setenv("GITPILOT_MATRIXLAB_RUNNER_IMAGE", RUNNER_IMAGE)
    monkeypatch.setenv("GITPILOT_MATRIXLAB_SANDBOX_IMAGES", BASE_IMAGE)
    monkeypatch.setenv("GITPILOT_MATRIXLAB_CONTAINER", name)
    monkeypatch.setenv("GITPILOT_MATRIXLAB_JOBS_DIR", str(tmp_path / "jobs"))
    service = SandboxService(settings=SettingsStore(sandbox_config_dir), root_dir=tmp_path)
    service.settings.update(
        {
            "matrixlab_url": f"http://127.0.0.1:{free_port()}",
            "matrixlab_token": "docker-" + secrets.token_urlsafe(12),
        }
    )
    yield service
    import docker.errors

    with contextlib.suppress(docker.errors.NotFound):
        docker_engine.containers.get(name).remove(force=True)
