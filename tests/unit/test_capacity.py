"""Admission: the caps on runs under way, in all, per identity and on memory committed."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gitpilot_jupyter.sandbox.errors import Busy, InvalidSetting
from gitpilot_jupyter.sandbox.service.capacity import Admission, CapacityLimits


def admission(**limits: int) -> Admission:
    return Admission(CapacityLimits(**{"max_runs": 4, "memory_budget_mb": 0, **limits}))


async def test_per_user_cap_spares_other_users_and_the_shared_principal() -> None:
    caps = admission(max_runs_per_user=1)
    await caps.admit("alice", memory_mb=1, backend="subprocess")
    with pytest.raises(Busy) as refused:
        await caps.admit("alice", memory_mb=1, backend="subprocess")
    assert (refused.value.status, refused.value.code, refused.value.retry_after) == (429, "busy", 2)
    await caps.admit("bob", memory_mb=1, backend="subprocess")
    # The token's one principal (no user) has the server's cap, not one user's.
    await caps.admit(None, memory_mb=1, backend="subprocess")
    await caps.admit(None, memory_mb=1, backend="subprocess")
    with pytest.raises(Busy, match="its cap: 4"):
        await caps.admit(None, memory_mb=1, backend="subprocess")
    assert caps.report()["refused"] == 2


async def test_memory_counts_local_runs_only_and_a_lone_run_always_starts() -> None:
    caps = admission(memory_budget_mb=1000)
    alone = await caps.admit(None, memory_mb=4096, backend="subprocess")  # over it, but alone
    await caps.admit(None, memory_mb=4096, backend="matrixlab")  # the Runner's memory, not ours
    with pytest.raises(Busy, match="budget of 1000 MiB"):
        await caps.admit(None, memory_mb=64, backend="off")
    caps.release(alone)
    assert caps.report()["memory_committed_mb"] == 0
    await caps.admit(None, memory_mb=512, backend="off")
    assert caps.report()["memory_committed_mb"] == 512


def test_a_waiting_run_gets_the_place_a_run_of_another_thread_frees() -> None:
    caps = admission(max_runs=1)
    held = asyncio.run(caps.admit(None, memory_mb=1, backend="subprocess"))
    admitted = threading.Event()

    def waiter() -> None:
        asyncio.run(caps.admit(None, memory_mb=1, backend="subprocess", wait=True))
        admitted.set()

    thread = threading.Thread(target=waiter)
    thread.start()
    while caps.report()["waiting"] != 1:
        assert thread.is_alive()
        threading.Event().wait(0.01)
    assert not admitted.is_set()
    caps.release(held)
    thread.join(timeout=10)
    assert admitted.is_set()
    assert caps.report()["runs"] == 1


def test_caps_must_be_positive() -> None:
    with pytest.raises(InvalidSetting):
        CapacityLimits(max_runs=0)
    with pytest.raises(InvalidSetting):
        CapacityLimits(max_batch_workers=0)
    limits = CapacityLimits(max_runs=10)
    assert (limits.per_user, limits.batch_workers) == (5, 10)
