"""Row 1 with network on: egress to the world, not the host (threat model, last paragraph).

The test builds its own little world: a network namespace standing for the host (with a
service on its loopback and one on its own address) whose default route leads, over a
veth pair, to a second namespace standing for the internet (a web server). The CLI runs
a network-on snippet inside the "host": the web server answers; the host's loopback, its
own address and link-local (cloud metadata) do not. No outside address is ever used.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.system import require_system

PROBE = r"""
import json, socket
out = {}
for name, addr in %(targets)r.items():
    try:
        s = socket.create_connection(tuple(addr), timeout=3)
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        out[name] = s.recv(12).decode(errors="replace")
    except OSError as exc:
        out[name] = type(exc).__name__ + ": " + str(exc.errno)
print(json.dumps(out))
"""
LISTEN = (
    "import socket, sys, time\n"
    "s = socket.create_server((sys.argv[1], int(sys.argv[2])))\n"
    "s.settimeout(90)\n"
    "try:\n"
    "    while True:\n"
    "        c, _ = s.accept(); c.sendall(b'HTTP/1.0 200 host-service\\r\\n\\r\\n'); c.close()\n"
    "except OSError:\n"
    "    pass\n"
)


@dataclass
class World:
    host_ns: str
    net_ns: str
    host_addr: str
    web_addr: str


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture
def world() -> Iterator[World]:
    """Two namespaces joined by a veth pair; the "host" routes everything to the "net"."""
    if os.geteuid() != 0:
        pytest.skip("making network namespaces needs root (the root pass of .ci/run runs this)")
    require_system("slirp4netns", shutil.which("slirp4netns") is not None, "not on PATH")
    require_system("ip", shutil.which("ip") is not None, "iproute2 not on PATH")
    tag = secrets.token_hex(3)
    subnet = f"198.18.{secrets.randbelow(200) + 20}"
    world = World(f"gph-{tag}", f"gpn-{tag}", f"{subnet}.1", f"{subnet}.2")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _ip("netns", "add", world.host_ns)
        _ip("netns", "add", world.net_ns)
        _ip("link", "add", f"gph{tag}", "type", "veth", "peer", "name", f"gpn{tag}")
        _ip("link", "set", f"gph{tag}", "netns", world.host_ns)
        _ip("link", "set", f"gpn{tag}", "netns", world.net_ns)
        for ns, dev, addr in (
            (world.host_ns, f"gph{tag}", world.host_addr),
            (world.net_ns, f"gpn{tag}", world.web_addr),
        ):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", world.host_ns, "route", "add", "default", "via", world.web_addr)
        for ns, addr, port in (
            (world.net_ns, world.web_addr, "8080"),  # the world
            (world.host_ns, "127.0.0.1", "8888"),  # the Jupyter API, a local database
            (world.host_ns, "0.0.0.0", "5432"),  # a service on the host's own address
        ):
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, sys.executable, "-c", LISTEN, addr, port]
                )
            )
        yield world
    finally:
        for proc in procs:
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        for ns in (world.host_ns, world.net_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


def test_1_network_on_reaches_the_world_but_not_the_host(
    world: World, sandbox_config_dir: Path
) -> None:
    targets = {
        "world": [world.web_addr, 8080],
        "host loopback": ["127.0.0.1", 8888],
        "host address": [world.host_addr, 5432],
        "cloud metadata": ["169.254.169.254", 80],
    }
    cli = str(Path(sys.executable).with_name("jupyter-sandbox"))
    code = PROBE % {"targets": targets}
    argv = ["ip", "netns", "exec", world.host_ns, cli, "run", "python", "-c", code]
    proc = subprocess.run(
        [*argv, "--network", "--yes", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert "egress-only" in result["isolation"], result["isolation"]
    seen = json.loads(result["stdout"])
    assert seen["world"].startswith("HTTP/1.0 200"), seen
    assert seen["host loopback"].startswith("ConnectionRefusedError"), seen
    # A prohibit route: EACCES (13), at once, not a timeout.
    assert seen["host address"] == "PermissionError: 13", seen
    assert seen["cloud metadata"] == "PermissionError: 13", seen
