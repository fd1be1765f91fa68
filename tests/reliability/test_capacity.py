"""Capacity: a real server under more runs than its caps allow refuses the rest ``busy``.

Each test starts its own server with small caps (``--SandboxApp.max_concurrent_runs``,
``max_runs_per_user``, ``memory_budget_mb``, ``stream_*``) and saturates them with
real sleeping runs: the runs over a cap answer 429 ``busy`` with a ``Retry-After``
hint and their approval token stays valid, the admitted ones finish, and
``GET /status`` answers throughout with the load (``capacity``). A client that
stops reading an NDJSON stream has its run stopped. No timing is asserted here
(``make bench`` measures the status latency while saturated).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.identities import HeaderUsers, user_headers

from .conftest import Live, start_live, stop_and_sweep

#: A run that stays under way long enough to saturate the caps, then ends on its own.
SLEEP = "sleep 4; echo done"
#: How long a test waits for the server to reach a state (a deadline, not a measure).
DEADLINE_SEC = 40.0
REPO = Path(__file__).resolve().parents[2]
#: An identity provider with real users named by a header.
USERS_PROVIDER = f"{HeaderUsers.__module__}.{HeaderUsers.__name__}"


async def approved(http: httpx.AsyncClient, code: str, headers: dict[str, str]) -> str:
    """Plan and approve ``code`` (bash) as the caller of ``headers``: its token."""
    plan = await http.post(
        "/api/sandbox/plan", json={"language": "bash", "code": code}, headers=headers
    )
    assert plan.status_code == 200, plan.text
    approval = await http.post(
        "/api/sandbox/approve", json={"plan_id": plan.json()["plan"]["plan_id"]}, headers=headers
    )
    assert approval.status_code == 200, approval.text
    return str(approval.json()["approval_token"])


async def run(http: httpx.AsyncClient, token: str, headers: dict[str, str]) -> httpx.Response:
    return await http.post("/api/sandbox/run", json={"approval_token": token}, headers=headers)


async def capacity(http: httpx.AsyncClient, headers: dict[str, str]) -> dict[str, Any]:
    answer = await http.get("/api/sandbox/status", headers=headers)
    assert answer.status_code == 200, answer.text
    report: dict[str, Any] = answer.json()["capacity"]
    return report


async def until_runs(
    http: httpx.AsyncClient, headers: dict[str, str], runs: int, key: str = "runs"
) -> None:
    """Wait until ``runs`` runs are under way (the admitted ones have started), or
    as many are counted under ``key`` of the status's ``capacity``."""
    deadline = time.monotonic() + DEADLINE_SEC
    while (await capacity(http, headers))[key] != runs:
        assert time.monotonic() < deadline, f"the server never had {runs} runs {key}"
        await asyncio.sleep(0.1)


def run_events(live: Live) -> list[dict[str, Any]]:
    """The ``run`` audit events the server wrote so far."""
    events = (json.loads(line) for line in live.audit_events().splitlines() if line.strip())
    return [event for event in events if str(event.get("__schema__", "")).endswith("/run/v1")]


def assert_busy(answer: httpx.Response, why: str) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["code"] == "busy"
    assert why in answer.json()["message"]
    assert int(answer.headers["Retry-After"]) >= 1


def assert_ran(answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert (result["exit_code"], result["stdout"]) == (0, "done\n"), result


@pytest.fixture
def users_server(tmp_path: Path) -> Iterator[Live]:
    """A server with two real users, three runs at most, two per user, no memory cap."""
    live = start_live(
        tmp_path,
        env={
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        },
        args=[
            f"--ServerApp.identity_provider_class={USERS_PROVIDER}",
            "--SandboxApp.max_concurrent_runs=3",
            "--SandboxApp.max_runs_per_user=2",
            "--SandboxApp.memory_budget_mb=0",
        ],
    )
    live.http.headers.update(user_headers("alice"))  # the sweep's canary plan
    yield live
    stop_and_sweep(live)


async def test_caps_per_user_and_in_all_refuse_busy_while_status_answers(
    users_server: Live,
) -> None:
    alice, bob = user_headers("alice"), user_headers("bob")
    async with users_server.server.async_client() as http:
        alice_tokens = [await approved(http, f"{SLEEP} # a{i}", alice) for i in range(3)]
        bob_tokens = [await approved(http, f"{SLEEP} # b{i}", bob) for i in range(2)]
        first = [asyncio.ensure_future(run(http, token, alice)) for token in alice_tokens[:2]]
        await until_runs(http, alice, 2)
        # Alice's third run passes her own cap; Bob's first still fits the server's.
        assert_busy(await run(http, alice_tokens[2], alice), "the cap per user")
        bobs = asyncio.ensure_future(run(http, bob_tokens[0], bob))
        await until_runs(http, bob, 3)
        # The server runs three: Bob's second passes the cap in all.
        assert_busy(await run(http, bob_tokens[1], bob), "its cap: 3")
        # Saturated, the status answers with the load, again and again.
        loads = [await capacity(http, bob) for _ in range(20)]
        assert all(load["runs"] == 3 and load["max_runs"] == 3 for load in loads), loads
        assert loads[-1]["refused"] == 2
        for answer in await asyncio.gather(*first, bobs):
            assert_ran(answer)  # every admitted run finished
        # Nothing of the refused runs ran: their tokens stay valid for the retry.
        assert_ran(await run(http, alice_tokens[2], alice))
        assert_ran(await run(http, bob_tokens[1], bob))
    # Five runs happened (the audit says so); the two refusals were not runs.
    assert len(run_events(users_server)) == 5


@pytest.fixture
def memory_server(tmp_path: Path) -> Iterator[Live]:
    """A server whose runs may commit 1536 MiB of memory (a run's limit is 1024 by default)."""
    live = start_live(tmp_path, args=["--SandboxApp.memory_budget_mb=1536"])
    yield live
    stop_and_sweep(live)


async def test_memory_committed_past_the_budget_is_refused_busy(memory_server: Live) -> None:
    headers: dict[str, str] = {}
    async with memory_server.server.async_client() as http:
        big = [await approved(http, f"{SLEEP} # m{i}", headers) for i in range(2)]
        first = asyncio.ensure_future(run(http, big[0], headers))
        await until_runs(http, headers, 1)
        load = await capacity(http, headers)
        assert (load["memory_committed_mb"], load["memory_budget_mb"]) == (1024, 1536)
        assert_busy(await run(http, big[1], headers), "budget of 1536 MiB")
        # A run with a smaller limit still fits beside it.
        saved = await http.put("/api/sandbox/config", json={"memory_limit_mb": 256})
        assert saved.status_code == 200, saved.text
        small = await approved(http, f"{SLEEP} # small", headers)
        assert_ran(await run(http, small, headers))
        assert_ran(await first)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def stream_server(tmp_path: Path) -> Iterator[Live]:
    """A server whose streams hold 64 KiB unread at most, and stall for 3 s at most."""
    live = start_live(
        tmp_path,
        args=["--SandboxApp.stream_buffer_bytes=65536", "--SandboxApp.stream_stall_sec=3"],
    )
    yield live
    stop_and_sweep(live)


#: Fills the stream (its output cap's worth), then stays under way far past the stall.
CHATTY = "for i in $(seq 1 6000); do printf '%0200d\\n' $i; done; sleep 50; echo late"


def _never_reading_run(live: Live, token: str) -> socket.socket:
    """POST an NDJSON run on a socket whose client then never reads (a small window)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    host, port = live.server.url.removeprefix("http://").split(":")
    sock.connect((host, int(port)))
    body = json.dumps({"approval_token": token}).encode()
    head = (
        f"POST /api/sandbox/run HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: token {live.server.token}\r\nAccept: application/x-ndjson\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


async def test_a_client_that_stops_reading_has_its_run_stopped(stream_server: Live) -> None:
    readers = 4
    async with stream_server.server.async_client() as http:
        tokens = [await approved(http, f"{CHATTY} # s{i}", {}) for i in range(readers)]
        before = _rss_mb(stream_server.server.pid)
        sockets = [_never_reading_run(stream_server, token) for token in tokens]
        try:
            await until_runs(http, {}, readers)
            peak = before
            deadline = time.monotonic() + DEADLINE_SEC
            # The stall closes each stream and stops its run long before its 50 s sleep ends.
            while (await capacity(http, {}))["runs"]:
                peak = max(peak, _rss_mb(stream_server.server.pid))
                assert time.monotonic() < deadline, "a run of a client that stopped reading went on"
                await asyncio.sleep(0.2)
        finally:
            for sock in sockets:
                sock.close()
    # What the server held for the clients that stopped reading stayed within the bound.
    assert peak - before < 32, f"the server grew {peak - before:.0f} MiB for {readers} streams"
    runs = run_events(stream_server)
    assert len(runs) == readers and all(event["cancelled"] for event in runs), runs
    assert stream_server.server.log().count("closing the stream (its run is stopped)") == readers


@pytest.fixture
def batch_server(tmp_path: Path) -> Iterator[Live]:
    """A server that runs two runs at once, and three items of a batch at a time at most."""
    live = start_live(
        tmp_path,
        args=[
            "--SandboxApp.max_concurrent_runs=2",
            "--SandboxApp.max_batch_workers=3",
            "--SandboxApp.memory_budget_mb=0",
        ],
    )
    yield live
    stop_and_sweep(live)


async def test_a_batch_past_the_caps_waits_for_places_and_others_are_refused(
    batch_server: Live,
) -> None:
    items = [{"id": f"i{i}", "language": "bash", "code": f"sleep 2; echo {i}"} for i in range(4)]
    async with batch_server.server.async_client() as http:
        plan = await http.post("/api/sandbox/batch/plan", json={"items": items})
        assert plan.status_code == 200, plan.text
        batch_id = plan.json()["batch"]["batch_id"]
        approval = await http.post("/api/sandbox/batch/approve", json={"batch_id": batch_id})
        assert approval.status_code == 200, approval.text
        token = approval.json()["approval_token"]
        other = await approved(http, f"{SLEEP} # other", {})
        body = {"batch_id": batch_id, "approval_token": token, "workers": 64}
        batch = asyncio.ensure_future(http.post("/api/sandbox/batch", json=body))
        await until_runs(http, {}, 2)
        await until_runs(http, {}, 1, key="waiting")
        # The batch holds both places (its third worker waits for one); a run is refused.
        assert_busy(await run(http, other, {}), "its cap: 2")
        answer = await batch
    assert answer.status_code == 200, answer.text
    report = answer.json()["report"]
    # Asked for 64 workers, the batch ran 3 at a time; every item ran, none was refused.
    assert report["executor"] == "local (3 at a time)"
    assert report["ok"] == 4, answer.json()
    assert sorted(r["stdout"] for r in answer.json()["results"]) == [f"{i}\n" for i in range(4)]
