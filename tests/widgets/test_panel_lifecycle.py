"""The panel's Install / Start / Stop on a real Docker engine (the stand-in image as the Runner)."""

from __future__ import annotations

import pytest

from gitpilot_jupyter.kernel.client import LocalClient
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.widgets.panel import SandboxSettingsPanel
from tests.docker.conftest import docker_engine, lifecycle_service, test_images

pytestmark = pytest.mark.docker
__all__ = ["docker_engine", "lifecycle_service", "test_images"]  # fixtures used by name


def test_install_start_test_stop_from_the_panel(lifecycle_service: SandboxService) -> None:
    panel = SandboxSettingsPanel.for_client(LocalClient(lifecycle_service))
    model = panel.model
    assert model.lifecycle_enabled and model.lifecycle_reason == ""
    assert not panel.install.disabled and not panel.start.disabled and panel.stop.disabled

    panel.install.click()
    assert model.transcript.startswith("install done\n$ docker image inspect ")
    assert panel.progress.layout.display == "none"  # only shown while busy

    panel.start.click()
    assert model.message == "Start done.", model.transcript
    assert "$ docker run -d --name " in model.transcript
    assert model.lifecycle["running"] is True
    assert panel.start.disabled and not panel.stop.disabled
    assert "running: True" in panel.lifecycle_reason.value

    panel.test.click()  # the saved URL and token of the started Runner
    assert panel.test_result.value.startswith("✅ connected"), panel.test_result.value

    panel.stop.click()
    assert model.message == "Stop done.", model.transcript
    assert "$ docker stop " in model.transcript
    assert not panel.start.disabled and panel.stop.disabled
