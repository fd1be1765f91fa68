"""What the warm pool tests share: a pooled bwrap backend, requests, waiting for the pool."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.local import nsfree
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.pool import PoolConfig, Slot, WarmPool
from tests.support.system import require_system

from .conftest import SMALL, require_mechanism

PATH = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def pooled(
    mode: str = "auto", *, environ: dict[str, str] | None = None, **config: Any
) -> SubprocessSandbox:
    """A bwrap backend with a pool of its own."""
    require_mechanism("bwrap")
    isolator = LayeredIsolator("bwrap", environ=environ)
    backend = SubprocessSandbox(isolator=isolator, pool=PoolConfig(mode=mode, **config))
    require_system("bwrap", backend.pool_error() is None, f"no pool here: {backend.pool_error()}")
    return backend


def request(code: str, **extra: Any) -> RunRequest:
    extra.setdefault("env", dict(PATH))
    extra.setdefault("limits", SMALL)
    return RunRequest(language=extra.pop("language", "python"), code=code, timeout_sec=20, **extra)


def the_pool(backend: SubprocessSandbox) -> WarmPool:
    pool = backend.pool()
    assert pool is not None
    return pool


async def waiting_slot(backend: SubprocessSandbox) -> Slot:
    """A slot of a python ``pass`` run's key, started and waiting (one run made it)."""
    pool = the_pool(backend)
    await backend.run(request("pass"))
    await until(lambda: pool.idle() >= 1)
    return next(s for q in pool._idle.values() for s in q)


async def until(check: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "the pool did not get there in time"
        await asyncio.sleep(0.05)


def scenario(
    body: Callable[[SubprocessSandbox], Awaitable[None]], backend: SubprocessSandbox
) -> None:
    """Run ``body`` on one loop and close the pool afterwards, whatever happened."""

    async def main() -> None:
        try:
            await body(backend)
        finally:
            await backend.aclose()

    asyncio.run(main())


def own_uids_named(text: str) -> str:
    """``text`` with the uids of a root server's runs (each its own) as ``RUN-UID``."""
    low, high = nsfree.RUN_UID_BASE, nsfree.RUN_UID_BASE + nsfree.RUN_UID_COUNT
    return re.sub(r"\b\d{10}\b", lambda m: "RUN-UID" if low <= int(m[0]) < high else m[0], text)


def rest_run(http: Any, code: str) -> dict[str, Any]:
    """Plan, approve and run ``code`` (python) through the server's REST API."""
    plan = http.post("/api/sandbox/plan", json={"language": "python", "code": code})
    approval = http.post("/api/sandbox/approve", json={"plan_id": plan.json()["plan"]["plan_id"]})
    answer = http.post(
        "/api/sandbox/run", json={"approval_token": approval.json()["approval_token"]}
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result
