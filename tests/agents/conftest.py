"""Agent tests: no agent env vars from the shell, and no Jupyter server but the ones we start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live_server import LiveServer, start_live_server

_AGENT_ENV = ("GITPILOT_AGENT_APPROVAL", "GITPILOT_JUPYTER_URL", "GITPILOT_JUPYTER_TOKEN")


@pytest.fixture(autouse=True)
def agent_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Clear the agent env vars; an empty runtime folder so no other server is discovered."""
    for name in _AGENT_ENV:
        monkeypatch.delenv(name, raising=False)
    runtime = tmp_path / "jupyter-runtime"
    runtime.mkdir()
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    return runtime


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real ``jupyter server`` with the sandbox extension, shared by a module's tests."""
    server = start_live_server(tmp_path_factory.mktemp("live-server"))
    try:
        yield server
    finally:
        server.stop()
