"""Load: 1,000 sequential and 200 concurrent runs through a real server leave nothing behind.

The server runs with its default warm pool. After the runs, what it still holds
is exactly its waiting slots (as ``/status`` counts them): one run folder and one
run cgroup per slot, every child process inside a slot's cgroup, and no more file
descriptors than a warm-up's plus what the slots hold; its resident memory stayed
within bounds. A process, folder or cgroup of a finished run is a leak.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gitpilot_jupyter.sandbox.local.cgroups import run_prefix
from gitpilot_jupyter.sandbox.local.launches import _descendants
from tests.support.system import in_ci

from .conftest import Live, start_live, stop_and_sweep

SEQUENTIAL = 1_000
CONCURRENT = 200
CODE = "echo $((6 * 7))"
#: Slack for descriptors tornado or httpx keep for reasons of their own (pools, epoll).
FD_SLACK = 8
RSS_GROWTH_LIMIT_MB = 40
#: How long the server may take to release what finished runs held.
SETTLE_SEC = 15.0
#: Descriptors the server holds per waiting slot: the FIFO's two ends, stdout, stderr,
#: its two mount namespaces, a pidfd on its sandbox's init, its memory cgroup's OOM
#: record and the lock that claims its run uid on the host (idclaims) (a pre-started
#: python slot also the chain's own output; these runs are bash).
FDS_PER_SLOT = 9


@dataclass
class Footprint:
    """What a server process holds at one moment."""

    fds: int
    rss_mb: float
    children: list[tuple[int, str]]
    run_dirs: list[str]
    cgroups: list[str]
    #: Warm slots waiting or starting (``/status``): each owns one folder and one cgroup.
    slots: int
    #: The namespace-free engine keeps one folder and one cgroup made ahead for the next
    #: cold run (cleanup.SPARE_DIRS, cgroups.SPARES): 1 there, else 0.
    spares: int = 0

    @property
    def cgroup_names(self) -> set[str]:
        """One name per run cgroup (cgroup v1 has one folder per controller)."""
        return {os.path.basename(path) for path in self.cgroups}

    def strays(self) -> list[tuple[int, str]]:
        """Children outside every remaining (slot) cgroup: processes a run left."""
        names = self.cgroup_names
        return [child for child in self.children if not _cgroup_names(child[0]) & names]


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process below ``pid``: none should outlive its run."""
    found = []
    for child in _descendants(pid):
        with contextlib.suppress(OSError):
            state = Path(f"/proc/{child}/stat").read_text().rpartition(")")[2].split()[0]
            found.append((child, state))
    return found


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """A real server with the default warm pool (the suite's servers have it off), whose
    caps let all the concurrent runs in (test_capacity.py saturates them)."""
    instance = start_live(
        tmp_path_factory.mktemp("live"),
        env={"GITPILOT_SANDBOX_POOL": "auto"},
        # 200 runs at 1 GiB each pass any host's memory: the memory cap is off here.
        args=[f"--SandboxApp.max_concurrent_runs={CONCURRENT}", "--SandboxApp.memory_budget_mb=0"],
    )
    yield instance
    stop_and_sweep(instance)


def _cgroup_names(pid: int) -> set[str]:
    """The last path part of each cgroup ``pid`` is in, read from the host's ``/proc``."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return set()
    return {os.path.basename(line.rpartition(":")[2]) for line in lines}


def _run_cgroups(pid: int) -> list[str]:
    prefix = run_prefix(pid)
    found = []
    for root, dirs, _files in os.walk("/sys/fs/cgroup"):
        found += [os.path.join(root, d) for d in dirs if d.startswith(prefix)]
        if root.count("/") > 10:
            dirs[:] = []
    return found


def footprint(live: Live) -> Footprint:
    """The server's descriptors, memory, children, leftover run folders and cgroups."""
    pid = live.server.pid
    rss_kb = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    tmp = Path(live.server.env["TMPDIR"])
    return Footprint(
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        rss_mb=rss_kb / 1024,
        children=_children(pid),
        run_dirs=sorted(p.name for p in tmp.iterdir() if p.name.startswith("gitpilot-sandbox-")),
        cgroups=_run_cgroups(pid),
        slots=_waiting_slots(live),
        spares=int(_engine(live) == "landlock"),
    )


def _engine(live: Live) -> str:
    return str(live.http.get("/api/sandbox/status").json()["isolation_report"]["engine"])


def _pool_in_use(live: Live, baseline: Footprint) -> None:
    """Where the host allows a pool (always in CI), the runs go through its slots."""
    pool = live.http.get("/api/sandbox/status").json()["pool"]
    if pool["active"]:
        assert baseline.slots >= 1 and pool["hits"] > 0, pool
    else:
        assert not in_ci(), f"no warm pool in CI: {pool['reason']}"


def _waiting_slots(live: Live) -> int:
    pool = live.http.get("/api/sandbox/status").json()["pool"]
    return int(pool["idle"]) + int(pool["starting"])


def _fd_limit(after: Footprint, baseline: Footprint) -> int:
    return baseline.fds + FD_SLACK + FDS_PER_SLOT * max(0, after.slots - baseline.slots)


def _settled(after: Footprint, baseline: Footprint) -> bool:
    return (
        not after.strays()
        and after.slots <= len(after.run_dirs) <= after.slots + after.spares
        and after.slots <= len(after.cgroup_names) <= after.slots + after.spares
        and after.fds <= _fd_limit(after, baseline)
    )


def assert_clean(live: Live, baseline: Footprint, what: str) -> Footprint:
    """Fail when the server still holds anything of the runs once they settled.

    A run's pipes and cgroup are released by loop callbacks just after its answer
    is sent; a busy server gets a few seconds to process them. A leak stays.
    """
    started = time.monotonic()
    after = footprint(live)
    while not _settled(after, baseline) and time.monotonic() - started < SETTLE_SEC:
        time.sleep(0.25)
        after = footprint(live)
    assert after.strays() == [], f"{what}: child processes left: {after.strays()}"
    slots = f"{after.slots} waiting slots"
    held = range(after.slots, after.slots + after.spares + 1)
    assert len(after.run_dirs) in held, f"{what}: {slots}, run folders {after.run_dirs}"
    assert len(after.cgroup_names) in held, f"{what}: {slots}, cgroups {after.cgroups}"
    limit = _fd_limit(after, baseline)
    assert after.fds <= limit, f"{what}: fds {baseline.fds} -> {after.fds} (limit {limit})"
    growth = after.rss_mb - baseline.rss_mb
    assert growth <= RSS_GROWTH_LIMIT_MB, f"{what}: RSS grew {growth:.1f} MB"
    print(
        f"{what}: fds {baseline.fds}->{after.fds}, RSS {baseline.rss_mb:.1f}->{after.rss_mb:.1f} MB"
        f", {after.slots} waiting slots, settled after {time.monotonic() - started:.1f} s"
    )
    return after


def _token(http: httpx.Client) -> str:
    plan = http.post("/api/sandbox/plan", json={"language": "bash", "code": CODE})
    approval = http.post("/api/sandbox/approve", json={"plan_id": plan.json()["plan"]["plan_id"]})
    token: str = approval.json()["approval_token"]
    return token


def _body(token: str) -> dict[str, str]:
    return {"language": "bash", "code": CODE, "approval_token": token}


def test_a_thousand_sequential_runs_leak_nothing(live: Live) -> None:
    http = live.server.client()  # unrecorded: 3,000 answers need no secret sweep of their own
    try:
        for _ in range(20):  # warm up caches, pools, probes
            assert http.post("/api/sandbox/run", json=_body(_token(http))).status_code == 200
        baseline = footprint(live)
        _pool_in_use(live, baseline)
        failures = []
        for i in range(SEQUENTIAL):
            answer = http.post("/api/sandbox/run", json=_body(_token(http)))
            if answer.status_code != 200 or answer.json()["stdout"] != "42\n":
                failures.append((i, answer.status_code, answer.text[:200]))
        assert failures == []
    finally:
        http.close()
    assert_clean(live, baseline, f"{SEQUENTIAL} sequential runs")


def test_two_hundred_concurrent_runs_leak_nothing(live: Live) -> None:
    with live.server.client() as http:
        http.post("/api/sandbox/run", json=_body(_token(http)))
        baseline = footprint(live)
        tokens = [_token(http) for _ in range(CONCURRENT)]

    async def run_all() -> list[httpx.Response]:
        async with live.server.async_client(timeout=300) as client:
            return await asyncio.gather(
                *(client.post("/api/sandbox/run", json=_body(t)) for t in tokens)
            )

    answers = asyncio.run(run_all())
    bad = [(a.status_code, a.text[:200]) for a in answers if a.status_code != 200]
    assert bad == []
    assert {a.json()["stdout"] for a in answers} == {"42\n"}
    assert_clean(live, baseline, f"{CONCURRENT} concurrent runs")
