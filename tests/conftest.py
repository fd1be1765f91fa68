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

#: Folders whose tests share the machine's state (the Docker engine's images, containers and
#: names; the Dask clusters' fixed dashboard port): each runs in one test process of
#: ``make test-core``'s several (pytest-xdist).
_ONE_PROCESS = ("docker", "batch")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group the tests for ``--dist loadgroup``: a file's tests stay in one process (its
    module fixtures are made once), and so do those of each folder in :data:`_ONE_PROCESS`."""
    tests = Path(__file__).parent
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        path = Path(str(item.path))
        parts = path.relative_to(tests).parts if path.is_relative_to(tests) else (str(path),)
        group = parts[0] if parts[0] in _ONE_PROCESS else "/".join(parts)
        item.add_marker(pytest.mark.xdist_group(group))


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
