"""What the session tests share: the limits, requests, cells and a bwrap backend."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.sessions import SessionManager
from gitpilot_jupyter.sandbox.spec import RunSpec

#: Room for the kernel itself (about 60 MiB) and a cell's work.
LIMITS = ResourceLimits(memory_mb=256, max_processes=64, max_file_size_mb=8)
ROOT = Path(__file__).resolve().parents[2]


def start_request(*, network: bool = False, limits: ResourceLimits = LIMITS) -> RunRequest:
    """What a session is started with: its network, limits and environment."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RunRequest(
        language="python", code="", timeout_sec=0, allow_network=network, env=env, limits=limits
    )


def cell(name: str, code: str, *, timeout_sec: int = 20) -> RunSpec:
    """The approved spec of one cell of session ``name``."""
    return RunSpec(
        language="python",
        code=code,
        stdin=None,
        timeout_sec=timeout_sec,
        network=False,
        backend="subprocess",
        session=name,
    )


def with_sessions(
    backend: SubprocessSandbox,
    body: Callable[[SessionManager], Awaitable[None]],
    **kwargs: Any,
) -> None:
    """Run ``body`` with a manager on ``backend``; every session is stopped after."""

    async def main() -> None:
        manager = SessionManager(backend, **kwargs)
        try:
            await body(manager)
        finally:
            await manager.aclose()

    asyncio.run(main())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "Z"
