"""Attacks on warm slots and on the runs beside them, where only the backend can set the scene.

A loaded host is played by stopping a waiting slot's processes (SIGSTOP): its
bubblewrap then reads no code, and the hand-over of code bigger than the FIFO's
buffer waits. A server without a run cgroup is played by an isolator told not to
make one. What happens then is checked from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

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


def request(code: str, **extra: Any) -> RunRequest:
    extra.setdefault("limits", SMALL)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RunRequest(language="python", code=code, env=env, **extra)


@pytest.mark.parametrize("ended_by", ["stop", "timeout"])
def test_7_a_hand_over_cut_short_runs_no_part_of_the_code(ended_by: str, reaper: list[str]) -> None:
    # Without a run cgroup, only the backend's own kill stands between a slot and a life
    # of its own (as root; a server that is not root needs one for a pool at all: it
    # uses its delegated one). Every prefix of this code is valid Python: any part of it
    # that reached bubblewrap would run.
    name = nonce("partial")
    reaper.append(name)
    code = f"import os\nos.execv('/bin/sleep', [{name!r}, '30'])\n#" + "x" * 300_000 + "\n"
    isolator = LayeredIsolator("bwrap", cgroups=os.geteuid() != 0)
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


FORKS = r"""
import os, time
forked = 0
for _ in range(12):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    forked += 1
print(forked)
"""


def test_8_waiting_slots_take_nothing_of_a_runs_process_allowance() -> None:
    # Without a pids cgroup (a server that is not root and has none delegated) the
    # process cap is RLIMIT_NPROC, which the kernel counts over every process of the
    # server's user namespaces together: eight waiting slots would take most of a
    # 16-process allowance, and slots past it would fail to start, again and again.
    limits = dataclasses.replace(SMALL, max_processes=16)
    backend = SubprocessSandbox(
        isolator=LayeredIsolator("bwrap", cgroups=False),
        pool=PoolConfig(mode="auto", max_slots=8, min_slots=8),
    )
    results: list[RunResult] = []
    why: list[str | None] = []

    async def body() -> None:
        results.append(await backend.run(request(FORKS, timeout_sec=20, limits=limits)))
        why.append(backend.pool_error())
        pool = backend.pool()
        if pool is not None:  # a pool here: let it fill up first
            deadline = time.monotonic() + 60
            while pool.idle() < 8 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
        results.append(await backend.run(request(FORKS, timeout_sec=20, limits=limits)))

    try:
        asyncio.run(body())
    finally:
        asyncio.run(backend.aclose())
    first, second = results
    assert first.exit_code == 0 and second.exit_code == 0, [(r.stderr, r.warm) for r in results]
    # Both get their allowance (less what the user's other processes use meanwhile):
    # the first while slots start, the second (warm, if there is a pool) with eight waiting.
    assert min(int(first.stdout), int(second.stdout)) >= 4, (first.stdout, second.stdout)
    if "rlimit-nproc" in first.isolation and "own-uid" in first.isolation:
        # Each run and slot a uid of its own: counted in its own user namespaces, so the
        # pool works, and the second run was warm with eight slots waiting beside it.
        assert why[0] is None and second.warm, (why, second.warm)
    elif "rlimit-nproc" in first.isolation:
        assert "RLIMIT_NPROC" in str(why[0]), why  # no pool: said so in status


def test_8_a_host_that_cannot_start_slots_is_not_asked_again_and_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Whatever makes a slot fail to start (here the temp folder is gone; a full disk or a
    # broken bubblewrap do the same) fails the next one too: started again at once, the
    # pool kept a core busy and the log growing for as long as its key was in demand.
    backend = SubprocessSandbox(isolator=LayeredIsolator("bwrap"), pool=PoolConfig(mode="auto"))
    require_system("bwrap", backend.pool_error() is None, f"no pool here: {backend.pool_error()}")
    counted: list[int] = []

    async def body() -> None:
        pool = backend.pool()
        assert pool is not None
        await backend.run(request("pass", timeout_sec=20))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
        pool.flush()
        with contextlib.suppress(OSError):  # the cold run cannot start either
            await backend.run(request("pass", timeout_sec=20))
        before = pool.stats["failed"]
        await asyncio.sleep(3)
        counted.append(pool.stats["failed"] - before)

    try:
        asyncio.run(body())
    finally:
        monkeypatch.undo()
        asyncio.run(backend.aclose())
    assert counted[0] <= 2 * backend.pool_config.spawn_concurrency, counted


HOLD = r"""
import os, sys, time
forked = 0
for _ in range(%(count)d):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(%(hold)d)
        os._exit(0)
    forked += 1
print(forked, flush=True)
time.sleep(%(hold)d)
"""


def test_8_a_run_holding_its_processes_leaves_the_next_run_its_allowance(
    reaper: list[str],
) -> None:
    # Without a pids cgroup the cap is RLIMIT_NPROC: the user's processes plus the run's
    # allowance. The kernel counts the runs' processes (another uid, in the server's
    # user namespaces) with the user's: a run that holds its whole allowance left none
    # to the run after it, which could not even start (unshare: fork failed).
    limits = dataclasses.replace(SMALL, max_processes=24)
    backend = SubprocessSandbox(
        isolator=LayeredIsolator("bwrap", cgroups=False), pool=PoolConfig(mode="off")
    )
    results: list[RunResult] = []

    async def body() -> None:
        holder = asyncio.ensure_future(
            backend.run(request(HOLD % {"count": 40, "hold": 8}, timeout_sec=30, limits=limits))
        )
        await asyncio.sleep(3)  # it holds what it could start
        results.append(
            await backend.run(
                request(HOLD % {"count": 8, "hold": 0}, timeout_sec=30, limits=limits)
            )
        )
        results.append(await holder)

    asyncio.run(body())
    second, first = results
    assert first.exit_code == 0 and second.exit_code == 0, [r.stderr for r in results]
    assert int(first.stdout) >= 8 and int(second.stdout) == 8, (first.stdout, second.stdout)
