"""What every benchmark shares: measurements, statistics, the servers, the REST flow."""

from __future__ import annotations

import contextlib
import http.client
import json
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
from typing import Any, Protocol
from urllib.parse import urlsplit

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


@dataclass
class RestAnswer:
    """One answer of :class:`RestClient`: what the benchmarks read of an ``httpx.Response``."""

    status_code: int
    content: bytes

    def json(self) -> Any:
        """The body, decoded."""
        return json.loads(self.content)

    def raise_for_status(self) -> None:
        """Raise on a 4xx or 5xx answer, with its body."""
        if self.status_code >= 400:
            raise RuntimeError(f"HTTP {self.status_code}: {self.content[:500]!r}")


class RestClient:
    """A keep-alive HTTP/1.1 client of the standard library, to time the server and not a client.

    The REST counterpart of :func:`bare_spawn` (``subprocess.run``): the standard
    library's way. Same token header, same JSON, one kept connection, each request in
    one write. Measured against one trivial authenticated jupyter_server POST on a
    2-core machine: a raw socket 0.63 ms, this client 0.97 ms, ``httpx.Client`` 1.67 ms
    (its own Python; a body written apart from its headers costs the server only
    ~0.05 ms). So ``httpx`` would add ~2 ms of client to a plan + approve + run.
    """

    def __init__(self, url: str, token: str, *, timeout: float = 60.0) -> None:
        parts = urlsplit(url)
        assert parts.hostname and parts.port, url
        self._connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
        self._headers = {"Authorization": f"token {token}"}

    def request(self, method: str, path: str, *, json_body: Any = None) -> RestAnswer:
        """Send one request on the kept connection and read its whole answer."""
        headers = dict(self._headers)
        body = None
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers["Content-Type"] = "application/json"
        self._connection.request(method, path, body=body, headers=headers)
        answer = self._connection.getresponse()
        return RestAnswer(answer.status, answer.read())

    def get(self, path: str) -> RestAnswer:
        """``GET path``."""
        return self.request("GET", path)

    def post(self, path: str, *, json: Any = None) -> RestAnswer:
        """``POST path`` with ``json`` as the body."""
        return self.request("POST", path, json_body=json)

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Answer(Protocol):
    def json(self) -> Any: ...

    def raise_for_status(self) -> object: ...


class Http(Protocol):
    """What the REST flow needs of a client: ``httpx.Client`` or :class:`RestClient`."""

    def post(self, url: str, *, json: Any = None) -> _Answer: ...


def plan_and_approve(http: Http, language: str, code: str, **extra: Any) -> str:
    """Plan and approve through REST; the approval token."""
    plan = http.post("/api/sandbox/plan", json={"language": language, "code": code, **extra})
    plan.raise_for_status()
    plan_id = plan.json()["plan"]["plan_id"]
    approval = http.post("/api/sandbox/approve", json={"plan_id": plan_id})
    approval.raise_for_status()
    token: str = approval.json()["approval_token"]
    return token


def rest_run(http: Http, language: str, code: str, **extra: Any) -> dict[str, Any]:
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

    def rest(self, isolation: str = "auto", *args: str) -> RestClient:
        """A :class:`RestClient` on the server for ``isolation`` and ``args``."""
        server = self.server(isolation, *args)
        return RestClient(server.url, server.token)

    @contextlib.contextmanager
    def http(self, isolation: str = "auto") -> Iterator[httpx.Client]:
        """A keep-alive client on the server for ``isolation``."""
        with self.server(isolation).client() as client:
            yield client

    def close(self) -> None:
        """Stop every server started."""
        for server in self.servers.values():
            server.stop()
