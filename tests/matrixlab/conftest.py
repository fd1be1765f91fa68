"""Fixtures for the matrixlab tests: stand-in Runners and a service pointed at one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from gitpilot_jupyter.sandbox.matrixlab.backend import MatrixLabSandbox
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.support.standin_fixture import StandinRunner


@pytest.fixture
def service(sandbox_config_dir: Path, tmp_path: Path) -> SandboxService:
    """An in-process service on a private settings folder."""
    return SandboxService(settings=SettingsStore(sandbox_config_dir), root_dir=tmp_path)


@pytest.fixture
def matrixlab_service(
    service: SandboxService,
    runner_standin: StandinRunner,
) -> SandboxService:
    """The service with the stand-in saved as its MatrixLab Runner (backend not selected)."""
    service.settings.update(
        {"matrixlab_url": runner_standin.url, "matrixlab_token": runner_standin.token}
    )
    return service


def backend_for(
    runner: StandinRunner, token: str | None = None, image: str = ""
) -> MatrixLabSandbox:
    """A backend talking to ``runner`` (with its own token unless one is given)."""
    return MatrixLabSandbox(
        url=runner.url, token=runner.token if token is None else token, image=image
    )


def sent_requests(runner: StandinRunner) -> list[dict[str, object]]:
    """The POSTs the stand-in received, oldest first."""
    answer = httpx.get(runner.url + "/_standin/requests", timeout=10).json()
    requests: list[dict[str, object]] = answer["requests"]
    return requests
