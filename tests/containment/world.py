"""A little network world for the egress test, made of network namespaces (needs root).

``python -m tests.containment.world -- COMMAND...`` (as root) builds one, runs COMMAND
inside its "host" namespace with the world described in :data:`WORLD_ENV`, and removes
it afterwards: that is how an ordinary user's test process (which cannot make network
namespaces) gets one, e.g. ``.ci/run``'s docker-group pass of ``test_egress.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.support.system import require_system

#: The world a process was started in (JSON of :class:`World`), set by :func:`main`.
WORLD_ENV = "GITPILOT_TEST_WORLD"

LISTEN = (
    "import socket, sys, time\n"
    "s = socket.create_server((sys.argv[1], int(sys.argv[2])))\n"
    "s.settimeout(300)\n"
    "try:\n"
    "    while True:\n"
    "        c, _ = s.accept(); c.sendall(b'HTTP/1.0 200 host-service\\r\\n\\r\\n'); c.close()\n"
    "except OSError:\n"
    "    pass\n"
)


@dataclass
class World:
    """The namespaces and addresses of one world."""

    host_ns: str
    net_ns: str
    host_addr: str
    web_addr: str
    #: The host's default gateway (the "net" namespace's address on the host's link).
    gateway_addr: str = ""
    #: A folder (anyone may write in it) the world's web server serves files from, at
    #: ``http://web_addr:files_port/``: a test puts what the world offers there (a package index).
    files_dir: str = ""
    files_port: int = 8000
    #: True in a process started inside ``host_ns`` (by :func:`main`).
    entered: bool = False


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@contextlib.contextmanager
def built_world() -> Iterator[World]:
    """Two namespaces joined by a veth pair; the "host" routes everything to the "net".

    As on a real host, the world's web server is beyond the default gateway (the "net"
    namespace, the host's router, whose address is on the host's own link): a network-on
    run must reach it, while the link and the gateway, like the host, stay out of reach.
    Needs root; everything is removed afterwards.
    """
    tag = secrets.token_hex(3)
    octet = secrets.randbelow(200) + 20
    subnet = f"198.18.{octet}"
    gateway = f"{subnet}.2"
    world = World(f"gph-{tag}", f"gpn-{tag}", f"{subnet}.1", f"198.19.{octet}.10", gateway)
    world.files_dir = tempfile.mkdtemp(prefix="gitpilot-world-")
    # The test filling it may be an ordinary user started inside the world by root.
    os.chmod(world.files_dir, 0o777)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _ip("netns", "add", world.host_ns)
        _ip("netns", "add", world.net_ns)
        _ip("link", "add", f"gph{tag}", "type", "veth", "peer", "name", f"gpn{tag}")
        _ip("link", "set", f"gph{tag}", "netns", world.host_ns)
        _ip("link", "set", f"gpn{tag}", "netns", world.net_ns)
        for ns, dev, addr in (
            (world.host_ns, f"gph{tag}", world.host_addr),
            (world.net_ns, f"gpn{tag}", gateway),
        ):
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", world.net_ns, "addr", "add", f"{world.web_addr}/32", "dev", "lo")
        _ip("-n", world.host_ns, "route", "add", "default", "via", gateway)
        for ns, addr, port in (
            (world.net_ns, world.web_addr, "8080"),  # the world
            (world.host_ns, "127.0.0.1", "8888"),  # the Jupyter API, a local database
            (world.host_ns, "0.0.0.0", "5432"),  # a service on the host's own address
            (world.net_ns, gateway, "5432"),  # the router's admin page, on the host's link
        ):
            procs.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, sys.executable, "-c", LISTEN, addr, port]
                )
            )
        files = [sys.executable, "-m", "http.server", "--bind", world.web_addr]
        files += ["--directory", world.files_dir, str(world.files_port)]
        procs.append(
            subprocess.Popen(
                ["ip", "netns", "exec", world.net_ns, *files],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
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
        shutil.rmtree(world.files_dir, ignore_errors=True)


def entered_world() -> World | None:
    """The world this process was started in by :func:`main`, if any."""
    raw = os.environ.get(WORLD_ENV)
    if not raw:
        return None
    return dataclasses.replace(World(**json.loads(raw)), entered=True)


@pytest.fixture
def world() -> Iterator[World]:
    """The world, built here as root; else the one root built and started this test in."""
    require_system("slirp4netns", shutil.which("slirp4netns") is not None, "not on PATH")
    if os.geteuid() == 0:
        require_system("ip", shutil.which("ip") is not None, "iproute2 not on PATH")
        with built_world() as made:
            yield made
        return
    given = entered_world()
    require_system(
        "a network world built by root",
        given is not None,
        "an ordinary user cannot make network namespaces: run this test as root, or "
        "inside `python -m tests.containment.world -- COMMAND` (root), as .ci/run does",
    )
    assert given is not None
    yield given


def main(argv: list[str]) -> int:
    """Build a world, run ``argv`` (after ``--``) in its "host", remove the world."""
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    if not command or os.geteuid() != 0:
        print(__doc__, file=sys.stderr)
        return 2
    with built_world() as world:
        env = {**os.environ, WORLD_ENV: json.dumps(dataclasses.asdict(world))}
        return subprocess.run(
            ["ip", "netns", "exec", world.host_ns, *command], env=env, check=False
        ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
