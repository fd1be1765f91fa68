"""An environment MatrixLab token goes only to the URL given with it, never to a saved one.

``GITPILOT_MATRIXLAB_TOKEN`` is the administrator's secret for one Runner: the one
``GITPILOT_MATRIXLAB_URL`` names (or the default URL when that is unset). A URL a
caller saves in the settings file must not carry it to another host. A recorder on
loopback stands in for such a host and keeps every ``Authorization`` header it gets.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.server.test_matrixlab_api import HeaderRecorder

ENV_TOKEN = "env-token-for-the-admins-runner"


@pytest.fixture
def recorder() -> Iterator[HeaderRecorder]:
    server = HeaderRecorder()
    try:
        yield server
    finally:
        server.close()


def status_with(folder: Path, env: dict[str, str], saved: dict[str, object]) -> dict[str, object]:
    settings = SettingsStore(folder, environ=env)
    settings.update({"backend": "matrixlab", **saved})
    return dict(asyncio.run(SandboxService(settings=settings).status()))


def test_a_saved_url_never_gets_the_environments_token(
    tmp_path: Path, recorder: HeaderRecorder
) -> None:
    status = status_with(
        tmp_path, {"GITPILOT_MATRIXLAB_TOKEN": ENV_TOKEN}, {"matrixlab_url": recorder.url}
    )
    assert recorder.authorizations(), "the status asked the saved URL's Runner"
    assert not any(ENV_TOKEN in (header or "") for header in recorder.authorizations())
    # Said, not silent: the token is not in use, and why.
    assert status["has_token"] is False and status["ok"] is False
    assert "GITPILOT_MATRIXLAB_URL" in str(status["env_error"])
    assert ENV_TOKEN not in json.dumps(status)


def test_a_token_saved_with_that_url_still_goes_to_it(
    tmp_path: Path, recorder: HeaderRecorder
) -> None:
    status_with(
        tmp_path,
        {"GITPILOT_MATRIXLAB_TOKEN": ENV_TOKEN},
        {"matrixlab_url": recorder.url, "matrixlab_token": "saved-with-the-url"},
    )
    assert "Bearer saved-with-the-url" in recorder.authorizations()
    assert not any(ENV_TOKEN in (header or "") for header in recorder.authorizations())


def test_the_url_pinned_with_the_token_gets_it(tmp_path: Path, recorder: HeaderRecorder) -> None:
    env = {"GITPILOT_MATRIXLAB_TOKEN": ENV_TOKEN, "GITPILOT_MATRIXLAB_URL": recorder.url}
    status = status_with(tmp_path, env, {"matrixlab_url": "http://127.0.0.1:9"})
    assert f"Bearer {ENV_TOKEN}" in recorder.authorizations()
    assert status["has_token"] is True and status["env_error"] is None
