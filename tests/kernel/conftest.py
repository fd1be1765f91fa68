"""A real IPython shell with the extension loaded (in-process path), and a real Jupyter server."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest
from IPython.core.interactiveshell import InteractiveShell

from gitpilot_jupyter.kernel.magics import SandboxMagics
from gitpilot_jupyter.sandbox.settings import ALLOWED_BACKENDS_ENV
from tests.support.live_server import LiveServer, start_live_server


@pytest.fixture
def shell() -> Iterator[InteractiveShell]:
    """A fresh ``InteractiveShell`` after ``%load_ext gitpilot_jupyter`` (server = local)."""
    InteractiveShell.clear_instance()
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "gitpilot_jupyter")
    ip.run_line_magic("config", 'SandboxMagics.server = "local"')
    yield ip
    InteractiveShell.clear_instance()


@pytest.fixture
def magics(shell: InteractiveShell) -> SandboxMagics:
    """The registered ``SandboxMagics`` instance."""
    found = [c for c in shell.configurables if isinstance(c, SandboxMagics)]
    assert len(found) == 1
    return found[0]


@pytest.fixture(autouse=True)
def venv_kernelspec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels started here run this virtualenv's python, whatever kernelspecs the user has."""
    monkeypatch.setenv("JUPYTER_PATH", os.path.join(sys.prefix, "share", "jupyter"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real ``jupyter server`` subprocess with the sandbox extension, one per test module.

    Its administrator allows ``off`` (test_client_paths switches to it on both paths).
    """
    live = start_live_server(
        tmp_path_factory.mktemp("live"), env={ALLOWED_BACKENDS_ENV: "subprocess,matrixlab,off"}
    )
    yield live
    live.stop()
