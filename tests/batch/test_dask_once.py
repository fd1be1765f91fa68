"""Finished work is never redone: each result leaves its worker at once, recorded once.

A real scheduler and two workers, each its own process. Executions are counted on
the host: the workers' administrator allows ``off`` here (``GITPILOT_WORKER_BACKENDS``),
so each run appends a line to a marker file of its item.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gitpilot_jupyter.sandbox.batch import read_results, run_batch
from gitpilot_jupyter.sandbox.batch.worker import WORKER_BACKENDS_ENV
from tests.support.dask_cluster import DaskProcesses, dask_processes

ITEMS = 80
#: Items of the memory test, and the size of each one's output.
BIG_ITEMS = 240
BIG_OUTPUT = 400_000


@pytest.fixture
def off_cluster(tmp_path: Path, allow_off: None) -> Iterator[DaskProcesses]:
    """Two workers whose administrator allows ``off`` (2 threads each), as does this one's."""
    with dask_processes(tmp_path / "dask", env={WORKER_BACKENDS_ENV: "off,subprocess"}) as c:
        yield c


def test_killing_a_worker_mid_batch_reruns_no_recorded_item(
    off_cluster: DaskProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    items = [
        {"id": f"n{i}", "language": "bash", "code": f"echo ran >> {markers}/n{i}; sleep 0.2"}
        for i in range(ITEMS)
    ]
    out = tmp_path / "results.jsonl"
    workers = off_cluster.workers()
    recorded_at_kill: dict[str, str] = {}
    batch = run_batch(items, out=out, backend="off", cluster=off_cluster.access)
    for seen, _ in enumerate(batch, 1):
        if seen == ITEMS // 4:
            # Everything yielded so far is in the results file: none of it may run again.
            recorded_at_kill = {r["id"]: r["worker"] for r in read_results(out)}
            off_cluster.kill("w1")
    assert len(recorded_at_kill) == ITEMS // 4
    records = read_results(out)
    assert Counter(r["id"] for r in records) == Counter(f"n{i}" for i in range(ITEMS))
    assert all(r["status"] == "ok" for r in records)
    runs = {p.name: len(p.read_text().splitlines()) for p in markers.iterdir()}
    assert set(runs) == {f"n{i}" for i in range(ITEMS)}
    # The killed worker had finished items whose results were recorded: none ran again.
    assert [i for i, w in recorded_at_kill.items() if w == workers["w1"]]
    assert {i: runs[i] for i in recorded_at_kill if runs[i] != 1} == {}
    # An item may run twice only when its result was not recorded when w1 died: one of
    # the window in flight (2 per worker thread).
    again = {i for i, n in runs.items() if n > 1}
    assert again.isdisjoint(recorded_at_kill) and len(again) <= 8, again


def _held(dask_worker: Any) -> int:
    """How many results (and scattered values) a worker holds in its memory now."""
    return len(dask_worker.data)


def test_worker_memory_stays_flat_whatever_the_batch_size(
    dask_cluster: DaskProcesses, tmp_path: Path
) -> None:
    code = f"head -c {BIG_OUTPUT} /dev/zero | tr '\\0' x"
    items = [{"id": i, "language": "bash", "code": code} for i in range(BIG_ITEMS)]
    pids = {name: proc.pid for name, proc in dask_cluster.procs.items() if name != "scheduler"}
    held: list[int] = []
    rss: dict[str, list[int]] = {name: [] for name in pids}
    done = threading.Event()

    def sample() -> None:
        with dask_cluster.client() as client:
            while not done.is_set():
                held.extend(client.run(_held).values())
                for name, pid in pids.items():
                    rss[name].append(psutil.Process(pid).memory_info().rss)
                time.sleep(0.2)

    sampler = threading.Thread(target=sample)
    started = time.monotonic()
    sizes = []
    for n, record in enumerate(run_batch(items, cluster=dask_cluster.access), 1):
        sizes.append(len(record["stdout"]))
        if n == 1:
            sampler.start()
    done.set()
    sampler.join()
    wall = time.monotonic() - started
    assert sizes == [BIG_OUTPUT] * BIG_ITEMS
    # At most the window (2 per worker thread: 8) and the scattered manifest, not the batch.
    assert held and max(held) <= 9, max(held)
    for name, seen in rss.items():
        settled = seen[len(seen) // 4]  # after the first quarter: the worker is warm
        growth_mb = (max(seen[len(seen) // 4 :]) - settled) / 2**20
        print(f"{name}: rss {settled / 2**20:.0f} MB, then +{growth_mb:.1f} MB; {wall:.1f} s")
        # Holding its half of the results would add ~45 MB.
        assert growth_mb < 20, (name, growth_mb)
