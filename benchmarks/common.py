"""What every benchmark shares: measurements, statistics, the servers, the REST flow."""

from __future__ import annotations

import contextlib
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.live_server import LiveServer, start_live_server

NDJSON = "application/x-ndjson"


@dataclass
class Measure:
    """One number of one benchmark, with its target and whether it was met."""

    bench: str
    name: str
    value: float
    unit: str
    target: str = ""
    ok: bool | None = None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def median(values: list[float]) -> float:
    """The median (0 for no values)."""
    return statistics.median(values) if values else 0.0


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile: the value ``pct`` % of the samples are at or below."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = 0.0
    with contextlib.suppress(OSError, ValueError):
        kb = Path("/proc/meminfo").read_text().split()[1]
        mem_gb = round(int(kb) / 1024 / 1024, 1)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_before": loadavg(),
    }


def rss_kb(pid: int) -> tuple[int, int]:
    """``(VmRSS, VmHWM)`` of a process in KiB (current and peak resident memory)."""
    values = {"VmRSS": 0, "VmHWM": 0}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key = line.split(":", 1)[0]
        if key in values:
            values[key] = int(line.split()[1])
    return values["VmRSS"], values["VmHWM"]


def bare_spawn(code: str, *, devnull: bool = False) -> float:
    """Seconds to run ``python -c code`` directly (the baseline every ratio divides by)."""
    out = subprocess.DEVNULL if devnull else subprocess.PIPE
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], stdout=out, stderr=out, check=True)
    return time.perf_counter() - started


def plan_and_approve(http: httpx.Client, language: str, code: str, **extra: Any) -> str:
    """Plan and approve through REST; the approval token."""
    plan = http.post("/api/sandbox/plan", json={"language": language, "code": code, **extra})
    plan.raise_for_status()
    plan_id = plan.json()["plan"]["plan_id"]
    approval = http.post("/api/sandbox/approve", json={"plan_id": plan_id})
    approval.raise_for_status()
    token: str = approval.json()["approval_token"]
    return token


def rest_run(http: httpx.Client, language: str, code: str, **extra: Any) -> dict[str, Any]:
    """Plan, approve and run through REST; the result envelope."""
    token = plan_and_approve(http, language, code, **extra)
    body = {"language": language, "code": code, "approval_token": token, **extra}
    answer = http.post("/api/sandbox/run", json=body)
    answer.raise_for_status()
    result: dict[str, Any] = answer.json()
    return result


@dataclass
class Context:
    """The state one ``make bench`` run shares: folders, servers, iteration counts."""

    workdir: Path
    quick: bool = False
    servers: dict[str, LiveServer] = field(default_factory=dict)

    def n(self, full: int) -> int:
        """Iterations: ``full``, or a few in ``--quick`` mode (a smoke run)."""
        return max(3, full // 10) if self.quick else full

    def server(self, isolation: str = "auto", *args: str) -> LiveServer:
        """A live Jupyter server whose subprocess backend uses ``isolation`` (auto / none).

        ``args`` are more server options (e.g. ``--SandboxApp.pool=auto``); without
        them the warm pool is off: every run starts cold.
        """
        key = " ".join((isolation, *args))
        if key not in self.servers:
            self.servers[key] = start_live_server(
                self.workdir / f"server-{len(self.servers)}",
                env={"GITPILOT_SANDBOX_ISOLATION": isolation},
                args=args,
            )
        return self.servers[key]

    def layers(self, isolation: str) -> list[str]:
        """The isolation layers the server reports as in force."""
        with self.server(isolation).client() as http:
            layers: list[str] = http.get("/api/sandbox/status").json()["isolation"]
        return layers

    @contextlib.contextmanager
    def http(self, isolation: str = "auto") -> Iterator[httpx.Client]:
        """A keep-alive client on the server for ``isolation``."""
        with self.server(isolation).client() as client:
            yield client

    def close(self) -> None:
        """Stop every server started."""
        for server in self.servers.values():
            server.stop()
