"""Fixtures for the OS isolation tests: a subprocess backend per isolation mechanism."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.results import RunResult
from tests.support.system import require_system

#: Small limits: a shared 2-core machine runs these tests.
SMALL = ResourceLimits(memory_mb=96, max_processes=32, max_file_size_mb=8)
#: The engines: bubblewrap, the namespace-free one, and the two without a file-system wall
#: (``unshare``, ``none``), which run only where an administrator accepted uncontained runs:
#: their tests are about what such runs still get (limits, the kill).
MECHANISMS = ["bwrap", "landlock", "unshare", "none"]
UNCONTAINED = ("unshare", "none")

# Linux isolation: elsewhere these tests are not collected at all.
collect_ignore_glob = [] if sys.platform == "linux" else ["test_*.py"]


def require_mechanism(mechanism: str) -> None:
    """bwrap / unshare must be installed (CI installs them)."""
    if mechanism in ("bwrap", "unshare"):
        require_system(mechanism, shutil.which(mechanism) is not None, f"{mechanism} not on PATH")


def make_backend(mechanism: str, *, cgroups: bool = True, **kwargs: object) -> SubprocessSandbox:
    """A subprocess backend whose isolator is capped at ``mechanism``."""
    require_mechanism(mechanism)
    kwargs.setdefault("allow_uncontained", mechanism in UNCONTAINED)
    isolator = LayeredIsolator(mechanism, cgroups=cgroups, **kwargs)  # type: ignore[arg-type]
    if mechanism == "landlock":
        require_landlock(isolator)
    elif mechanism != "none":
        require_system(
            mechanism,
            isolator.report()["namespaces"] == mechanism,
            f"{mechanism} cannot create namespaces here",
        )
    return SubprocessSandbox(isolator=isolator)


def require_landlock(isolator: LayeredIsolator) -> None:
    """The namespace-free engine must work (Landlock and seccomp: CI's kernel has both).

    A root server's runs drop to a uid of their own, which must be able to enter the
    interpreter's folders: CI's pyenv is in /root (0700), so as root this suite runs the
    engine through ``scripts/as_docker_user.py --stay-root`` (the folders opened up in a
    private mount namespace); started plainly as root, it says why it cannot.
    """
    gaps = {g["layer"]: g["reason"] for g in isolator.report()["unavailable"]}
    if os.geteuid() == 0 and "does not start behind the wall as uid" in gaps.get("landlock", ""):
        # Not a missing part but this host's shape: .ci/run runs these tests again as root
        # through scripts/as_docker_user.py --stay-root, where the engine works.
        pytest.skip(
            "the namespace-free engine as root needs an interpreter every user may enter "
            f"(.ci/run runs these with --stay-root): {gaps['landlock']}"
        )
    require_system("landlock", isolator.engine == "landlock", gaps.get("landlock", "unavailable"))


def run(
    backend: SubprocessSandbox,
    code: str,
    *,
    language: str = "python",
    timeout_sec: int = 20,
    allow_network: bool = False,
    limits: ResourceLimits = SMALL,
    env: dict[str, str] | None = None,
) -> RunResult:
    """Run one snippet on ``backend`` and return its result."""
    request = RunRequest(
        language=language,
        code=code,
        timeout_sec=timeout_sec,
        allow_network=allow_network,
        limits=limits,
        env=env if env is not None else {"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    return asyncio.run(backend.run(request))


def marked_processes(mark: str) -> list[int]:
    """Host pids whose environment carries ``mark`` (processes a test started)."""
    found = []
    needle = mark.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ:
            found.append(int(entry))
    return found


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on the host's loopback; the kernel completes connects to it."""
    server = socket.create_server(("127.0.0.1", 0))
    server.listen(16)
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def mark() -> Iterator[str]:
    """A unique env marker; any process still carrying it after the test is killed."""
    value = f"GITPILOT_TEST_MARK_{uuid.uuid4().hex}"
    yield value
    for pid in marked_processes(value):
        with contextlib.suppress(OSError):
            os.kill(pid, 9)


@pytest.fixture
def bwrap() -> SubprocessSandbox:
    """A backend on the bubblewrap engine (sessions need its mount namespace)."""
    return make_backend("bwrap")
