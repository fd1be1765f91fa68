"""The hostile-snippet suite: each threat-model row attacked through the REST flow or the CLI.

Every test runs the real attack on the default backend with default settings and
looks at the effect from outside (a socket, a sysctl, a file, a process, a key).
It runs as root (as CI does) and, from ``.ci/run``, again as an unprivileged user in
the ``docker`` group, since that is how most people run Jupyter.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.local.pool import POOL_ENV
from tests.server.conftest import api, jp_server_config, openapi
from tests.server.helpers import Api, approved_run
from tests.support.processes import processes_named, wait_for_process
from tests.support.system import in_ci, require_system

__all__ = ["api", "jp_server_config", "openapi", "processes_named", "wait_for_process"]

collect_ignore_glob = [] if sys.platform == "linux" else ["test_*.py"]


@pytest.fixture(autouse=True)
def default_backend_with_bwrap() -> None:
    """The suite is about the default backend's bwrap confinement (CI installs it)."""
    require_system("bwrap", shutil.which("bwrap") is not None, "bwrap not on PATH")


@pytest.fixture(autouse=True, params=["cold", "warm"])
def pool(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every attack twice: started cold, and through a warm pool slot (forced: no cold path).

    Set before the server (or the CLI) starts; :func:`attack` checks which path ran.
    """
    monkeypatch.setenv(POOL_ENV, "always" if request.param == "warm" else "off")
    return str(request.param)


async def attack(api: Api, code: str, *, language: str = "python", **extra: Any) -> dict[str, Any]:
    """Plan, approve and run ``code`` through the REST flow; the result (a 200 is required)."""
    answer = await approved_run(api, language, code, **extra)
    assert answer.code == 200, answer.text
    body: dict[str, Any] = answer.body
    if body.get("backend") == "subprocess":
        # The attack ran the way the ``pool`` fixture asked (a warm slot or a cold start).
        assert body["warm"] is (os.environ.get(POOL_ENV) == "always"), body
    return body


def nonce(kind: str) -> str:
    """A unique, recognisable name for what an attack leaves behind."""
    return f"gitpilot-{kind}-{secrets.token_hex(6)}"


def status_fields(pid: int) -> dict[str, list[str]]:
    """``Uid``, ``Gid``, ``Groups`` and ``CapEff`` of a process, as the host sees them."""
    text = Path(f"/proc/{pid}/status").read_text()
    return {
        line.split(":", 1)[0]: line.split(":", 1)[1].split()
        for line in text.splitlines()
        if line.split(":", 1)[0] in ("Uid", "Gid", "Groups", "CapEff")
    }


def runs_drop_groups() -> bool:
    """True when this server's runs drop to a uid with no supplementary groups.

    Root's always do. A server that is not root needs newuidmap/newgidmap and a
    subordinate range (CI installs uidmap and gives its docker-group user one):
    without them here that is a failure in CI, and the disclosed gap elsewhere.
    """
    from gitpilot_jupyter.sandbox.local import namespaces

    tool, _ = namespaces.detect("bwrap")
    drops = tool is not None and tool.confine is not None and tool.confine.drops
    if not drops and in_ci():
        gap = tool.confine.groups_gap if tool is not None and tool.confine is not None else None
        pytest.fail(f"CI's runs must drop their groups: {gap}", pytrace=False)
    return drops


@pytest.fixture
def planted() -> Iterator[Path]:
    """A folder outside /tmp (which the sandbox replaces), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="gitpilot-containment-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def reaper() -> Iterator[list[str]]:
    """Names of processes an attack may leave; any still alive afterwards is killed."""
    names: list[str] = []
    yield names
    for name in names:
        for pid in processes_named(name):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
