"""Attacks on a warm slot itself, where only the backend can set the scene.

A loaded host is played by stopping a waiting slot's processes (SIGSTOP): its
bubblewrap then reads no code, and the hand-over of code bigger than the FIFO's
buffer waits. What happens then is checked from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.pool import PoolConfig
from gitpilot_jupyter.sandbox.results import RunResult
from tests.isolation.conftest import SMALL
from tests.support.system import require_system

from .conftest import nonce, processes_named, wait_for_process


@pytest.fixture(autouse=True)
def pool() -> str:
    """These attacks are on a slot: warm only (the backend is made with its pool here)."""
    return "warm"


def request(code: str, **extra: object) -> RunRequest:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RunRequest(language="python", code=code, env=env, limits=SMALL, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize("ended_by", ["stop", "timeout"])
def test_7_a_hand_over_cut_short_runs_no_part_of_the_code(ended_by: str, reaper: list[str]) -> None:
    # Without a run cgroup (a server that is not root and has none delegated), only the
    # backend's own kill stands between a slot and a life of its own. Every prefix of
    # this code is valid Python: any part of it that reached bubblewrap would run.
    name = nonce("partial")
    reaper.append(name)
    code = f"import os\nos.execv('/bin/sleep', [{name!r}, '30'])\n#" + "x" * 300_000 + "\n"
    isolator = LayeredIsolator("bwrap", cgroups=False)
    backend = SubprocessSandbox(isolator=isolator, pool=PoolConfig(mode="always"))
    require_system("bwrap", backend.pool_error() is None, f"no pool here: {backend.pool_error()}")
    results: list[RunResult] = []
    frozen: list[int] = []

    async def body() -> None:
        pool = backend.pool()
        assert pool is not None
        await backend.run(request("pass", timeout_sec=20))
        deadline = time.monotonic() + 30
        while pool.idle() < 1:
            assert time.monotonic() < deadline, "no slot started"
            await asyncio.sleep(0.05)
        slot = next(s for queue in pool._idle.values() for s in queue)
        frozen.append(slot.popen.pid)
        os.killpg(slot.popen.pid, signal.SIGSTOP)  # a loaded host: it reads nothing now
        stop = asyncio.Event()
        if ended_by == "stop":
            asyncio.get_running_loop().call_later(1.0, stop.set)
        timeout = 2 if ended_by == "timeout" else 60
        # The service gives a stopped run a grace period, then cancels it: so does this.
        run = backend.run(request(code, timeout_sec=timeout, stop=stop))
        with contextlib.suppress(asyncio.TimeoutError):
            results.append(await asyncio.wait_for(run, 10))
        thaw()  # the host's load is over; the server goes on
        ran.append(await asyncio.to_thread(wait_for_process, name, 3))

    def thaw() -> None:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGCONT)

    ran: list[int | None] = []
    started = time.monotonic()
    try:
        asyncio.run(body())
    finally:
        thaw()
        asyncio.run(backend.aclose())
    took = time.monotonic() - started
    # From outside: nothing of the code ever runs, not even after the slot is let go.
    assert ran == [None], "part of the code ran after its run was over"
    assert processes_named(name) == []
    assert results, f"the run did not end by its {ended_by} (still handing over the code)"
    (result,) = results
    assert result.warm and result.exit_code == -1, result
    assert (result.cancelled, result.timed_out) == (ended_by == "stop", ended_by == "timeout")
    assert took < 30
