"""Load: 1,000 sequential and 200 concurrent runs through a real server leave nothing behind.

After the runs, the server holds no more file descriptors than after a warm-up,
its private TMPDIR holds no run folder, no run cgroup is left, it has no child
process (zombie or not), and its resident memory stayed within bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from gitpilot_jupyter.sandbox.local.layered import _descendants

from .conftest import Live

SEQUENTIAL = 1_000
CONCURRENT = 200
CODE = "echo $((6 * 7))"
#: Slack for descriptors tornado or httpx keep for reasons of their own (pools, epoll).
FD_SLACK = 8
RSS_GROWTH_LIMIT_MB = 40
#: How long the server may take to release what finished runs held.
SETTLE_SEC = 15.0


@dataclass
class Footprint:
    """What a server process holds at one moment."""

    fds: int
    rss_mb: float
    children: list[tuple[int, str]]
    run_dirs: list[str]
    cgroups: list[str]


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process below ``pid``: none should outlive its run."""
    found = []
    for child in _descendants(pid):
        with contextlib.suppress(OSError):
            state = Path(f"/proc/{child}/stat").read_text().rpartition(")")[2].split()[0]
            found.append((child, state))
    return found


def _run_cgroups(pid: int) -> list[str]:
    prefix = f"gitpilot-run-{pid}-"
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
    )


def _settled(after: Footprint, baseline: Footprint) -> bool:
    return (
        not (after.children or after.run_dirs or after.cgroups)
        and after.fds <= baseline.fds + FD_SLACK
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
    assert after.children == [], f"{what}: child processes left: {after.children}"
    assert after.run_dirs == [], f"{what}: run folders left: {after.run_dirs[:5]}"
    assert after.cgroups == [], f"{what}: run cgroups left: {after.cgroups[:5]}"
    assert after.fds <= baseline.fds + FD_SLACK, f"{what}: fds {baseline.fds} -> {after.fds}"
    growth = after.rss_mb - baseline.rss_mb
    assert growth <= RSS_GROWTH_LIMIT_MB, f"{what}: RSS grew {growth:.1f} MB"
    print(
        f"{what}: fds {baseline.fds}->{after.fds}, RSS {baseline.rss_mb:.1f}->{after.rss_mb:.1f} MB"
        f", settled after {time.monotonic() - started:.1f} s"
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
