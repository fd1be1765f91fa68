"""Parity cases that need the Runner's real containers: the CPU limit and network on.

The stand-in runs with ``--docker-image``, so each run is a container made as Runner 0.1.0
makes it (``--cpus`` from ``cpu_limit``, Docker's default bridge for ``allow_network``).
``docs/admin/matrixlab.md`` (Remaining differences) states each difference asserted here.
Network probes go only to this machine: a listener the test starts on the Docker bridge's
gateway address, and the stand-in's own API.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.errors import ContainmentUnavailable
from gitpilot_jupyter.sandbox.local.rlimits import CPU_SECONDS
from gitpilot_jupyter.sandbox.matrixlab.config import LifecycleConfig
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.docker.conftest import BASE_IMAGE
from tests.support.runs import run_here
from tests.support.standin_fixture import StandinRunner, StartStandin

pytestmark = pytest.mark.docker

#: Spins two processes for SPIN_SEC of wall time; prints the CPU-time rlimit, the cgroup's
#: CPU quota (in CPUs, "none" without one) and the CPU-seconds the two got.
SPIN_SEC = 2.0
CPU_SNIPPET = f"""python3 - <<'PY'
import multiprocessing, os, resource, time

def spin():
    end = time.monotonic() + {SPIN_SEC}
    while time.monotonic() < end:
        pass

def quota():
    try:
        limit, period = open("/sys/fs/cgroup/cpu.max").read().split()
        return "none" if limit == "max" else float(limit) / float(period)
    except OSError:
        pass
    try:
        limit = int(open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").read())
        period = int(open("/sys/fs/cgroup/cpu/cpu.cfs_period_us").read())
        return "none" if limit < 0 else limit / period
    except OSError:
        return "none"

procs = [multiprocessing.Process(target=spin) for _ in range(2)]
for p in procs:
    p.start()
for p in procs:
    p.join()
used = os.times().children_user + os.times().children_system
print(resource.getrlimit(resource.RLIMIT_CPU)[0], quota(), round(used, 2))
PY
"""


@pytest.fixture
def container_runner(
    docker_engine: Any, test_images: None, start_standin: StartStandin
) -> StandinRunner:
    # On every address, as a Runner published on the host is: the bridge reaches it.
    args = ["--docker-image", BASE_IMAGE, "--host", "0.0.0.0"]
    return start_standin(token="parity-containers", args=args)


def service_for(
    runner: StandinRunner, config_dir: Path, root: Path, *, isolated: bool
) -> SandboxService:
    service = SandboxService(
        settings=SettingsStore(config_dir),
        root_dir=root,
        lifecycle_config=LifecycleConfig(network_isolated=isolated),
    )
    service.settings.update({"matrixlab_url": runner.url, "matrixlab_token": runner.token})
    return service


async def test_the_cpu_limit_is_a_quota_on_the_runner_and_cpu_time_locally(
    container_runner: StandinRunner, sandbox_config_dir: Path, tmp_path: Path
) -> None:
    service = service_for(container_runner, sandbox_config_dir, tmp_path, isolated=False)
    answers = {}
    for backend in ("subprocess", "matrixlab"):
        _, result = await run_here(
            service, language="bash", code=CPU_SNIPPET, timeout_sec=30, backend=backend
        )
        assert result.exit_code == 0, (backend, result.stderr)
        rlimit, quota, used = result.stdout.split()
        answers[backend] = (int(rlimit), quota, float(used))
    # Locally: CPU time, SIGKILL past CPU_SECONDS, and no rate limit.
    assert answers["subprocess"][:2] == (CPU_SECONDS, "none")
    # On the Runner: no CPU-time limit, a quota of 1 CPU: two busy processes share one
    # core for the whole wall time (at most ~SPIN_SEC CPU-seconds between them).
    remote_rlimit, remote_quota, remote_used = answers["matrixlab"]
    assert (remote_rlimit, remote_quota) == (-1, "1.0")
    assert remote_used <= SPIN_SEC * 1.0 + 0.4, answers


@contextlib.contextmanager
def greeter(address: str) -> Iterator[int]:
    """A TCP listener on ``address`` that writes ``reached`` to each connection: its port."""
    server = socket.create_server((address, 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"reached\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def bridge_gateway(engine: Any) -> str:
    """This machine's address on Docker's default bridge (where the Runner's runs go)."""
    config = engine.networks.get("bridge").attrs["IPAM"]["Config"][0]
    # Without an explicit gateway Docker gives the bridge the subnet's first address.
    return str(config.get("Gateway") or ipaddress.ip_network(config["Subnet"])[1])


def probe(address: str, port: int, runner_port: int) -> str:
    """A snippet that tries the greeter and the Runner's /health at ``address``."""
    return f"""python3 - <<'PY'
import socket
def reach(port, send=b""):
    try:
        with socket.create_connection(({address!r}, port), timeout=3) as s:
            s.sendall(send)
            return s.recv(200).split(b"\\n")[0].decode()
    except OSError as exc:
        return "unreachable"
print(reach({port}))
print(reach({runner_port}, b"GET /health HTTP/1.0\\r\\n\\r\\n"))
PY
"""


async def test_network_on_is_refused_unless_isolated_and_then_reaches_this_host(
    docker_engine: Any,
    container_runner: StandinRunner,
    sandbox_config_dir: Path,
    tmp_path: Path,
) -> None:
    gateway = bridge_gateway(docker_engine)
    with greeter(gateway) as port:
        code = probe(gateway, port, container_runner.port)
        refusing = service_for(container_runner, sandbox_config_dir, tmp_path, isolated=False)
        with pytest.raises(ContainmentUnavailable) as refused:
            await run_here(
                refusing, language="bash", code=code, allow_network=True, backend="matrixlab"
            )
        assert "matrixlab_network_isolated" in refused.value.message
        isolated = service_for(container_runner, sandbox_config_dir, tmp_path, isolated=True)
        _, off = await run_here(
            isolated, language="bash", code=code, timeout_sec=20, backend="matrixlab"
        )
        assert off.exit_code == 0 and off.stdout == "unreachable\nunreachable\n", off.stderr
        # What the administrator vouched for is the Runner's network: on this stand-in
        # (the Runner's own `allow_network`, Docker's bridge) a network-on snippet reaches
        # this machine's services on the bridge and the Runner's own API.
        _, on = await asyncio.wait_for(
            run_here(
                isolated,
                language="bash",
                code=code,
                timeout_sec=20,
                allow_network=True,
                backend="matrixlab",
            ),
            60,
        )
        assert on.exit_code == 0, on.stderr
        reached, health = on.stdout.splitlines()
        assert reached == "reached" and health.startswith("HTTP/1.") and " 200 " in health
