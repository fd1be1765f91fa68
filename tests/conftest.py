"""Shared fixtures: every test gets its own settings folder and a clean environment."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = [
    "pytest_jupyter.jupyter_server",
    "pytest_jupyter.jupyter_client",
    # runner_standin / start_standin: a real Runner stand-in process for any test.
    "tests.support.standin_fixture",
]

# A suite started in the background by a non-interactive shell (`make test &`) inherits
# SIGINT ignored, and so would every CLI process the tests Ctrl-C. A handler here is
# reset to the default in each child, as in a terminal.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

_SANDBOX_ENV = (
    "GITPILOT_SANDBOX",
    "GITPILOT_MATRIXLAB_URL",
    "GITPILOT_MATRIXLAB_TOKEN",
    "GITPILOT_MATRIXLAB_IMAGE",
    "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE",
    "GITPILOT_SANDBOX_REQUIRE_APPROVAL",
    "GITPILOT_SANDBOX_ISOLATION",
    "GITPILOT_SANDBOX_POOL_MAX",
    "GITPILOT_SANDBOX_ALLOWED_BACKENDS",
    "JUPYTERHUB_USER",
)


@pytest.fixture(autouse=True)
def sandbox_config_dir(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A private ``GITPILOT_CONFIG_DIR`` and no sandbox env vars from the developer's shell."""
    folder = tmp_path_factory.mktemp("gitpilot-config")
    for name in _SANDBOX_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITPILOT_CONFIG_DIR", str(folder))
    # No warm pool unless a test asks for one (tests/isolation/test_pool.py; the
    # containment suite runs with the pool forced on and off): slots started in the
    # background of every other test would only load this shared machine.
    monkeypatch.setenv("GITPILOT_SANDBOX_POOL", "off")
    yield folder


@pytest.fixture
def allow_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The administrator of this process allows backend ``off`` (it is not by default)."""
    monkeypatch.setenv("GITPILOT_SANDBOX_ALLOWED_BACKENDS", "subprocess,matrixlab,off")
