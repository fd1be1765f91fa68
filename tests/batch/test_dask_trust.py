"""A Dask cluster a snippet cannot take over: mutual TLS or refused, workers that check.

A real scheduler and two workers, each its own process (:mod:`tests.support.dask_cluster`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from gitpilot_jupyter.sandbox.batch import (
    BatchService,
    ClusterAccess,
    DaskExecutor,
    items_from_list,
    read_results,
    run_batch,
)
from gitpilot_jupyter.sandbox.batch.worker import (
    block_cluster,
    manifest_payload,
    plan_payload,
    run_item,
)
from gitpilot_jupyter.sandbox.errors import ClusterInsecure, ClusterUnavailable
from gitpilot_jupyter.sandbox.local import blockednets
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.batch.test_rest import approve, plan_batch
from tests.containment.world import built_world
from tests.server.helpers import server_config
from tests.support.dask_cluster import DASK, DaskProcesses, dask_processes
from tests.support.system import require_system

BIN = Path(sys.executable).parent / "jupyter-sandbox"
#: What the snippets of these tests print when they got somewhere.
REACHED = "REACHED"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    """One scheduler and two workers for the module's tests (none of them kills one)."""
    with dask_processes(tmp_path_factory.mktemp("dask")) as made:
        yield made


def test_a_plain_tcp_scheduler_is_refused_with_the_reason_and_the_fix(tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"id": 1, "language": "bash", "code": "echo 1"}) + "\n")
    out = tmp_path / "out.jsonl"
    command = [str(BIN), "batch", str(items), "--out", str(out), "--yes", "--json"]
    # Nothing listens there: the refusal comes before any connection.
    done = subprocess.run(
        [*command, "--cluster", "tcp://127.0.0.1:9"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "cluster_insecure" and error["status"] == 400
    assert error["message"].startswith("refusing the Dask scheduler at tcp://127.0.0.1:9")
    assert "--tls-ca-file" in error["message"] and "--cluster local" in error["message"]
    assert not out.exists() or not read_results(out)
    # An address without a scheme is tcp:// to Dask: refused the same way, from the API too.
    with pytest.raises(ClusterInsecure) as refused:
        list(run_batch([{"id": 1, "language": "bash", "code": "echo 1"}], cluster="host:8786"))
    assert refused.value.status == 400
    assert "a tcp:// scheduler runs any code" in refused.value.message


def test_a_tls_address_without_a_certificate_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CA_FILE", "CLIENT__CERT", "CLIENT__KEY"):
        monkeypatch.delenv(f"DASK_DISTRIBUTED__COMM__TLS__{name}", raising=False)
    with pytest.raises(ClusterInsecure) as refused:
        ClusterAccess("tls://127.0.0.1:9").security()
    assert "needs a certificate authority and a client certificate" in refused.value.message


def _one_item_batch(access: Any) -> Any:
    batches = BatchService(SandboxService(require_approval=False))
    batch = batches.plan(items_from_list([{"id": 1, "language": "bash", "code": "echo 1"}]))
    return batches.start(
        batches.claim(batch.batch_id, None), executor=DaskExecutor(access, connect_timeout=3)
    )


async def test_the_scheduler_refuses_a_certificate_of_another_authority(
    cluster: DaskProcesses, tmp_path: Path
) -> None:
    stranger = DaskProcesses(tmp_path / "stranger").access  # a throw-away authority of its own
    run = _one_item_batch(replace(stranger, address=cluster.address))
    with pytest.raises(ClusterUnavailable) as failed:
        async for _ in run.results():
            pass
    assert f"cannot reach the Dask scheduler at {cluster.address}" in failed.value.message


@pytest.mark.usefixtures("allow_off")
def test_off_sent_to_a_worker_that_does_not_allow_it_is_refused(
    cluster: DaskProcesses, tmp_path: Path
) -> None:
    marker = tmp_path / "ran-on-the-host"
    items = [{"id": "x", "language": "bash", "code": f"touch {marker}; echo {REACHED}"}]
    records = list(run_batch(items, backend="off", cluster=cluster.access, out=None))
    assert [r["status"] for r in records] == ["error"]
    assert records[0]["code"] == "backend_not_allowed" and "'off'" in records[0]["error"]
    assert records[0]["worker"] in cluster.workers().values()
    assert not marker.exists()


def test_a_forged_task_is_refused_by_the_worker(cluster: DaskProcesses, tmp_path: Path) -> None:
    marker = tmp_path / "forged-ran"
    batches = BatchService(SandboxService(require_approval=False))
    batch = batches.plan(items_from_list([{"id": "a", "language": "bash", "code": "echo a"}]))
    entries = [(i, p.digest) for i, p in batch.items.items()]
    manifest = manifest_payload(batch.digest, batch.deadline_sec, entries)
    approved = batch.items["a"]
    forged_plan = replace(approved, spec=replace(approved.spec, code=f"touch {marker}"))
    forged = {**plan_payload(forged_plan, None), "id": "a"}
    made_up = manifest_payload("sha256:" + "0" * 64, batch.deadline_sec, entries)
    with cluster.client() as client:
        # The approved item runs; its code changed, or a manifest of its own, is refused.
        good = client.submit(run_item, {**plan_payload(approved, None), "id": "a"}, manifest)
        assert good.result(timeout=60)["result"]["stdout"] == "a\n"
        for payload, sent in ((forged, manifest), ({**forged, "id": "b"}, manifest)):
            answer = client.submit(run_item, payload, sent, pure=False).result(timeout=60)
            assert answer["code"] == "approval_mismatch", answer
            assert "not the one the manifest approved" in answer["error"]
        answer = client.submit(run_item, forged, made_up, pure=False).result(timeout=60)
        assert answer["code"] == "approval_mismatch" and "does not hash" in answer["error"]
    assert not marker.exists()


PROBE = r"""
import socket
for host, port in %(targets)r:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(host, port, "REACHED")
    except OSError as exc:
        print(host, port, "nowhere:", type(exc).__name__)
"""


def test_a_network_on_item_cannot_reach_its_loopback_scheduler(
    cluster: DaskProcesses,
) -> None:
    host, port = cluster.address.removeprefix("tls://").rsplit(":", 1)
    worker_ports = [int(a.rsplit(":", 1)[1]) for a in cluster.workers().values()]
    targets = [(host, int(port)), *((host, p) for p in worker_ports)]
    items = [{"id": "net", "language": "python", "code": PROBE % {"targets": targets}}]
    [record] = run_batch(items, allow_network=True, cluster=cluster.access)
    if record["status"] == "error":  # no egress-only network here: network-on is refused
        assert record["code"] == "network_unavailable", record
        return
    assert record["status"] == "ok", record
    lines = record["stdout"].splitlines()
    assert len(lines) == len(targets) and REACHED not in record["stdout"], lines


def test_the_magic_takes_the_certificate_options(
    cluster: DaskProcesses, shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # a list of dicts, simpler to read
    shell.run_cell('items = [{"id": i, "language": "bash", "code": f"echo {i}"} for i in range(4)]')
    with pytest.raises(UsageError, match=r"refusing the Dask scheduler.*\[cluster_insecure\]"):
        shell.run_line_magic("sandbox", "batch items --cluster tcp://127.0.0.1:9")
    tls = " ".join(cluster.tls_args)
    results = shell.run_line_magic("sandbox", f"batch items --cluster {cluster.address} {tls}")
    assert sorted(r["stdout"] for r in results) == ["0\n", "1\n", "2\n", "3\n"]
    assert {r["worker"] for r in results} <= set(cluster.workers().values())


def test_a_worker_blocks_its_clusters_addresses_for_network_on_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(blockednets, "_ALSO_BLOCKED", set())
    before = set(blockednets.blocked_networks())
    block_cluster(["tls://203.0.113.7:8786", "tls://127.0.0.1:40001", "tcp://[2001:db8::1]:1"])
    # (loopback is out of reach already, and the egress-only network has no IPv6)
    assert set(blockednets.blocked_networks()) - before == {"203.0.113.7/32"}


def _in_ns(namespace: str, command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            ["ip", "netns", "exec", namespace, *command], stdout=out, stderr=subprocess.STDOUT
        )


def test_a_network_on_item_cannot_reach_a_scheduler_beyond_the_gateway(tmp_path: Path) -> None:
    """The issue's second machine: a scheduler on a public-looking address that only the
    default route leads to (nothing around the host blocks it), its worker and the batch
    in the world's "host" namespace. The item reaches the world, not the scheduler."""
    if os.geteuid() != 0:
        pytest.skip("making network namespaces needs root")
    require_system("slirp4netns", shutil.which("slirp4netns") is not None, "not on PATH")
    require_system("ip", shutil.which("ip") is not None, "iproute2 not on PATH")
    certs = DaskProcesses(tmp_path / "certs")
    procs: list[subprocess.Popen[bytes]] = []
    with built_world() as world:
        scheduler = world.web_addr.rsplit(".", 1)[0] + ".11"  # beside the world's web server
        subprocess.run(
            ["ip", "-n", world.net_ns, "addr", "add", f"{scheduler}/32", "dev", "lo"], check=True
        )
        address = f"tls://{scheduler}:8786"
        try:
            procs.append(_in_ns(world.net_ns, [DASK, "scheduler", "--host", scheduler,
                "--port", "8786", "--protocol", "tls", "--no-dashboard", *certs.tls_args],
                tmp_path / "scheduler.log"))  # fmt: skip
            procs.append(_in_ns(world.host_ns, [DASK, "worker", address, "--host",
                world.host_addr, "--no-nanny", "--no-dashboard", "--nthreads", "1",
                *certs.tls_args], tmp_path / "worker.log"))  # fmt: skip
            targets = [(world.web_addr, 8080), (scheduler, 8786)]
            items = tmp_path / "items.jsonl"
            code = PROBE % {"targets": targets}
            items.write_text(json.dumps({"id": "net", "language": "python", "code": code}))
            out = tmp_path / "out.jsonl"
            batch = [str(BIN), "batch", str(items), "--out", str(out), "--network", "--yes",
                     "--deadline", "90", "--cluster", address, *certs.tls_args]  # fmt: skip
            done = subprocess.run(
                ["ip", "netns", "exec", world.host_ns, *batch],
                capture_output=True,
                text=True,
                timeout=150,
            )
        finally:
            for proc in procs:
                proc.kill()
                proc.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    [record] = read_results(out)
    assert record["status"] == "ok" and record["worker"].startswith(f"tls://{world.host_addr}:")
    reached, scheduler_line = record["stdout"].splitlines()
    assert reached == f"{world.web_addr} 8080 {REACHED}"  # the network is on
    assert scheduler_line.startswith(f"{scheduler} 8786 nowhere:"), scheduler_line


@pytest.fixture
def jp_server_config() -> Config:
    """A server whose administrator named a plain tcp:// scheduler."""
    return server_config(batch_cluster="tcp://127.0.0.1:9")


async def test_rest_refuses_a_plain_tcp_cluster(api: Any) -> None:
    batch = await plan_batch(api, [{"id": "1", "language": "bash", "code": "echo 1"}])
    token = await approve(api, batch["batch_id"])
    answer = await api(
        "POST", "api/sandbox/batch", {"batch_id": batch["batch_id"], "approval_token": token}
    )
    assert answer.code == 400, answer.text
    assert answer.body["code"] == "cluster_insecure"
    # Refused before the approval was spent: the same token is refused for the same reason,
    # not as used.
    again = await api(
        "POST", "api/sandbox/batch", {"batch_id": batch["batch_id"], "approval_token": token}
    )
    assert (again.code, again.body["code"]) == (400, "cluster_insecure"), again.text
