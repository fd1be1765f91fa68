"""Row 1 with network on: egress to the world, not the host (threat model, last paragraph).

The test builds its own little world (:mod:`.world`): a network namespace standing for
the host (with a service on its loopback and one on its own address) whose default route
leads, over a veth pair, to a second namespace standing for the internet (a web server).
The CLI runs a network-on snippet inside the "host": the web server answers; the host's
loopback, its own address and link-local (cloud metadata) do not. No outside address is
ever used. As root the test builds the world itself; an ordinary user cannot, so
``.ci/run`` builds it as root and runs the docker-group pass of this test inside its
"host" (``python -m tests.containment.world -- COMMAND``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .world import World, world

__all__ = ["world"]  # the fixture

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


def test_1_network_on_reaches_the_world_but_not_the_host(
    world: World, sandbox_config_dir: Path
) -> None:
    targets = {
        "world": [world.web_addr, 8080],
        "host loopback": ["127.0.0.1", 8888],
        "host address": [world.host_addr, 5432],
        # The link's interface is named like no bridge: blocked by its route, not its name.
        "host gateway": [world.gateway_addr, 5432],
        "cloud metadata": ["169.254.169.254", 80],
    }
    cli = str(Path(sys.executable).with_name("jupyter-sandbox"))
    code = PROBE % {"targets": targets}
    argv = [cli, "run", "python", "-c", code]
    if not world.entered:
        argv[:0] = ["ip", "netns", "exec", world.host_ns]
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
    assert seen["host gateway"] == "PermissionError: 13", seen
    assert seen["cloud metadata"] == "PermissionError: 13", seen
