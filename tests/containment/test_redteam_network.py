"""Network on through a warm slot: an address the host gains after the slot started.

A network-on run gets its own stack (slirp4netns) with a prohibit route for every
address of the host, read when its launch is made. A slot waits with the routes
of the host as it was; the host then gains an address (a new bridge, a VPN, a
database on a new interface). The slot must not be handed out with the old list.

The test builds its own world (:mod:`.world`, root only: it adds an interface to
the world's "host"); the server side is a backend with a forced pool, run inside
that "host" namespace.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.support.system import require_system

from .world import LISTEN, World, built_world


@pytest.fixture(autouse=True)
def pool() -> str:
    """The attack is on a waiting slot: warm only (the server side forces its pool)."""
    return "warm"


@pytest.fixture
def world() -> Iterator[World]:
    """A world of network namespaces, built here (root: it changes the world's host)."""
    require_system("slirp4netns", shutil.which("slirp4netns") is not None, "not on PATH")
    require_system("ip", shutil.which("ip") is not None, "iproute2 not on PATH")
    if os.geteuid() != 0:
        pytest.skip("giving the host a new address needs root (.ci/run runs this as root)")
    with built_world() as made:
        yield made


#: The server side: a network-on run warms a slot of its key, then (once the host has a
#: new address) a second run of that key tries the new address.
SERVER = r"""
import asyncio, json, os, sys, time
from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.pool import PoolConfig

PROBE = '''
import socket
try:
    s = socket.create_connection((%(addr)r, 5433), timeout=3)
    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    print(s.recv(12).decode(errors="replace"))
except OSError as exc:
    print(type(exc).__name__ + ": " + str(exc.errno))
'''

async def main():
    backend = SubprocessSandbox(isolator=LayeredIsolator("bwrap"), pool=PoolConfig(mode="always"))
    def request(code):
        return RunRequest(language="python", code=code, timeout_sec=20, allow_network=True,
                          limits=ResourceLimits(memory_mb=128, max_processes=32),
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    try:
        first = await backend.run(request("pass"))
        pool = backend.pool()
        deadline = time.monotonic() + 60
        while pool.idle() < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        print(json.dumps({"ready": pool.idle(), "egress": "egress-only" in first.isolation}),
              flush=True)
        sys.stdin.readline()  # the host gains its address now
        second = await backend.run(request(PROBE))
        print(json.dumps({"warm": second.warm, "stdout": second.stdout,
                          "stderr": second.stderr[-500:]}), flush=True)
    finally:
        await backend.aclose()

asyncio.run(main())
"""


def test_1_an_address_the_host_gains_after_the_slot_started_is_blocked(world: World) -> None:
    new_addr = world.host_addr.rsplit(".", 2)[0] + ".231.1"  # a subnet of its own
    code = SERVER.replace("%(addr)r", repr(new_addr))
    server = subprocess.Popen(
        ["ip", "netns", "exec", world.host_ns, sys.executable, "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    listener = None
    try:
        assert server.stdout is not None and server.stdin is not None
        ready = json.loads(server.stdout.readline())
        assert ready == {"ready": 1, "egress": True}, ready
        # The host gains an address, and a service listens on it.
        subprocess.run(
            ["ip", "-n", world.host_ns, "addr", "add", f"{new_addr}/32", "dev", "lo"], check=True
        )
        listener = subprocess.Popen(
            ["ip", "netns", "exec", world.host_ns, sys.executable, "-c", LISTEN, new_addr, "5433"]
        )
        subprocess.run(
            ["ip", "netns", "exec", world.host_ns, sys.executable, "-c",
             (f"import socket, time\nfor _ in range(100):\n    try:\n"
             f"        socket.create_connection(({new_addr!r}, 5433)).close(); break\n"
             f"    except OSError: time.sleep(0.05)")],
            check=True,
        )  # fmt: skip
        server.stdin.write("go\n")
        server.stdin.flush()
        seen = json.loads(server.stdout.readline())
    finally:
        for proc in (server, listener):
            if proc is not None:
                proc.kill()
                proc.wait(timeout=30)
        for pipe in (server.stdin, server.stdout):
            if pipe is not None:
                pipe.close()
    assert seen["warm"], seen  # a slot made after the change (mode always)
    # A prohibit route: EACCES at once; never the host's service.
    assert seen["stdout"] == "PermissionError: 13\n", seen
