"""Batches on real Dask: a scheduler and two workers, each its own process, one killed mid-batch."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from gitpilot_jupyter.sandbox.batch import (
    BatchService,
    DaskExecutor,
    items_from_list,
    read_results,
    run_batch,
)
from gitpilot_jupyter.sandbox.errors import ClusterUnavailable
from gitpilot_jupyter.sandbox.request import Caller
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.server.helpers import server_config
from tests.support.dask_cluster import DaskProcesses

BIN = Path(sys.executable).parent / "jupyter-sandbox"
ITEMS = 300


def test_a_worker_killed_mid_batch_loses_nothing_and_duplicates_nothing(
    dask_cluster: DaskProcesses, tmp_path: Path
) -> None:
    items = tmp_path / "items.jsonl"
    lines = [
        json.dumps({"id": f"n{i}", "language": "bash", "code": f"echo {i}; sleep 0.05"})
        for i in range(ITEMS)
    ]
    lines.append(json.dumps({"id": "wipe", "language": "bash", "code": "rm -rf /"}))
    items.write_text("\n".join(lines) + "\n")
    out = tmp_path / "results.jsonl"
    workers = dask_cluster.workers()
    command = [str(BIN), "batch", str(items), "--out", str(out), "--cluster", dask_cluster.address]
    command += dask_cluster.tls_args
    proc = subprocess.Popen(
        [*command, "--yes"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and len(out.read_text().splitlines()) >= ITEMS // 5:
            break
        time.sleep(0.05)
    # What w1 is running or holds at the moment it dies: Dask must rerun those elsewhere.
    with dask_cluster.client() as client:
        held = set(client.processing(workers=[workers["w1"]])[workers["w1"]])
    done_at_kill = len(out.read_text().splitlines())
    dask_cluster.kill("w1")
    _, stderr = proc.communicate(timeout=240)
    assert done_at_kill < ITEMS // 2, "the batch ended before the kill: make the items longer"
    assert proc.returncode == 1, stderr  # 1: the blocked item did not run
    records = read_results(out)
    counts = Counter(r["id"] for r in records)
    assert set(counts) == {f"n{i}" for i in range(ITEMS)} | {"wipe"}
    assert max(counts.values()) == 1, [k for k, v in counts.items() if v > 1]
    by_id = {r["id"]: r for r in records}
    assert by_id["wipe"]["status"] == "blocked" and "stdout" not in by_id["wipe"]
    ran = [r for r in records if r["id"] != "wipe"]
    assert all(r["status"] == "ok" and r["stdout"].startswith(r["id"][1:]) for r in ran)
    where = Counter(r["worker"] for r in ran)
    # Both workers ran items; the killed one only until it died, the other the rest.
    assert set(where) == {workers["w1"], workers["w2"]}
    # (give or take the few w1 had finished whose results were still on their way)
    assert where[workers["w2"]] >= ITEMS - done_at_kill - 10
    # Each result says how the worker node isolated it.
    assert all("tempdir" in r["isolation"] and "env-scrub" in r["isolation"] for r in ran)
    rerun = [r for r in ran if any(key.endswith(r["plan_id"]) for key in held)]
    assert held and len(rerun) == len(held)
    # (one may have finished on w1 in the instant between the question and the kill)
    assert [r for r in rerun if r["worker"] == workers["w2"]]
    assert "300 ok" in stderr and "1 blocked" in stderr


def test_a_local_cluster_runs_the_python_api(tmp_path: Path) -> None:
    items = [{"id": i, "language": "python", "code": f"print({i} * {i})"} for i in range(12)]
    out = tmp_path / "results.jsonl"
    results = list(run_batch(items, out=out, cluster="local", workers=2))
    assert sorted(int(r["stdout"]) for r in results) == [i * i for i in range(12)]
    assert len({r["worker"] for r in results}) >= 1
    # On loopback only, over TLS with a throw-away certificate (cryptography is installed).
    assert all(r["worker"].startswith("tls://127.0.0.1:") for r in results)
    assert sorted(r["id"] for r in read_results(out)) == sorted(str(i) for i in range(12))


def test_an_unreachable_scheduler_says_how_to_fix_it(tmp_path: Path) -> None:
    batches = BatchService(SandboxService(require_approval=False))
    batch = batches.plan(items_from_list([{"id": 1, "language": "bash", "code": "echo 1"}]))
    unreachable = DaskProcesses(tmp_path).access  # its certificates, and no scheduler
    run = batches.start(
        batches.claim(batch.batch_id, None),
        executor=DaskExecutor(replace(unreachable, address="tls://127.0.0.1:9"), connect_timeout=1),
    )

    async def go() -> None:
        async for _ in run.results():
            pass

    with pytest.raises(ClusterUnavailable) as failed:
        asyncio.run(go())
    assert "cannot reach the Dask scheduler at tls://127.0.0.1:9" in failed.value.message
    assert "dask scheduler" in failed.value.message and failed.value.status == 503


@pytest.fixture
def jp_server_config(dask_cluster: DaskProcesses) -> Config:
    """The server of the REST test below: ``SandboxApp.batch_cluster`` names the scheduler."""
    access = dask_cluster.access
    return server_config(
        batch_cluster=access.address,
        batch_tls_ca_file=access.tls_ca_file,
        batch_tls_cert=access.tls_cert,
        batch_tls_key=access.tls_key,
    )


async def test_the_server_sends_rest_batches_to_its_configured_cluster(
    dask_cluster: DaskProcesses, api: Any
) -> None:
    items = [{"id": str(i), "language": "bash", "code": f"echo {i}"} for i in range(8)]
    planned = await api("POST", "api/sandbox/batch/plan", {"items": items})
    batch_id = planned.body["batch"]["batch_id"]
    token = (await api("POST", "api/sandbox/batch/approve", {"batch_id": batch_id})).body
    answer = await api(
        "POST",
        "api/sandbox/batch",
        {"batch_id": batch_id, "approval_token": token["approval_token"]},
    )
    assert answer.code == 200, answer.text
    workers = set(dask_cluster.workers().values())
    assert {r["worker"] for r in answer.body["results"]} <= workers
    assert answer.body["report"]["ok"] == 8 and answer.body["report"]["executor"].startswith("dask")


def test_out_files_of_items_on_dask_workers_come_back_to_the_client(
    dask_cluster: DaskProcesses,
) -> None:
    code = (
        "import os\nos.makedirs('out/sub', exist_ok=True)\n"
        "open('out/sub/answer.txt', 'w').write('item {n}')\n"
        "open('out/big.bin', 'wb').write(bytes(range(256)) * 4096)\n"
    )
    items = [{"id": n, "language": "python", "code": code.format(n=n)} for n in range(4)]
    service = SandboxService(require_approval=False)
    results = list(run_batch(items, cluster=dask_cluster.access, service=service))
    assert len(results) == 4
    workers = set(dask_cluster.workers().values())
    for record in results:
        assert record["status"] == "ok" and record["worker"] in workers, record
        assert [f["name"] for f in sorted(record["files"], key=lambda f: f["name"])] == [
            "big.bin",
            "sub/answer.txt",
        ]
        # The client's service hands them to the run's owner, as a local item's.
        caller = Caller(user="api")
        text = service.run_file(record["run_id"], "sub/answer.txt", caller)
        assert text == f"item {record['id']}".encode()
        assert service.run_file(record["run_id"], "big.bin", caller) == bytes(range(256)) * 4096

    def runs_held_here() -> int:
        """(On a worker: defined here, it goes by value) the runs whose out/ files its
        sandbox service still keeps."""
        from gitpilot_jupyter.sandbox.batch import worker

        kept = worker._service
        return -1 if kept is None else len(kept.executor.out_store._runs)

    # ... and the workers keep no copy (each ran some: its service is up).
    with dask_cluster.client() as client:
        held = client.run(runs_held_here)
    assert set(held.values()) <= {0, -1} and 0 in held.values(), held
