"""The panel's Install / Start / Stop on a real Docker engine (the stand-in image as the Runner)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gitpilot_jupyter.client.local import LocalClient
from gitpilot_jupyter.client.rest import RestClient
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.widgets.panel import SandboxSettingsPanel
from tests.docker.conftest import docker_engine, lifecycle_service, test_images
from tests.support.live_server import start_live_server

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
    assert panel.test_result.value.startswith("✓ connected"), panel.test_result.value

    panel.stop.click()
    assert model.message == "Stop done.", model.transcript
    assert "$ docker stop " in model.transcript
    assert not panel.start.disabled and panel.stop.disabled


def test_install_over_rest_streams_progress_into_the_panel(
    lifecycle_service: SandboxService, tmp_path: Path
) -> None:
    lifecycle_env = {k: v for k, v in os.environ.items() if k.startswith("GITPILOT_")}
    lifecycle_env.pop("GITPILOT_CONFIG_DIR")
    server = start_live_server(tmp_path / "server", env=lifecycle_env)
    try:
        panel = SandboxSettingsPanel.for_client(RestClient(server.url, server.token))
        assert panel.model.lifecycle_enabled and not panel.install.disabled
        lines: list[str] = []
        panel.model.observe(lambda change: lines.append(change.new), "transcript")
        panel.install.click()
        # Pull progress arrived line by line before the final transcript.
        assert any(": already present" in line for line in lines[:-1]), lines
        assert panel.model.transcript.startswith("install done\n$ docker image inspect ")
    finally:
        server.stop()
