"""Rows 1 and 3 for a server in the ``docker`` group: its runs drop that group.

The view keeps host sockets out (no ``/run``, ``/var/run``, ``$HOME``), so these
attacks bind the Docker socket into the run on purpose, as a careless view change
or a socket in an interpreter folder would: only the dropped groups stand between
the snippet and the engine then. A chain that keeps the groups (what a non-root
server without newuidmap gets) is run beside it, to show the attack is real.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local import confine, namespaces
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.confine import without_idmap
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from tests.isolation.conftest import run
from tests.support.system import require_system

from .conftest import nonce, processes_named, runs_drop_groups, status_fields, wait_for_process
from .test_hostile import host_can_reach_docker

# Connects to the socket bound in and asks the engine for its version; then sleeps
# under a recognisable name, so the host can read its credentials.
PING = r"""
import socket, subprocess, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("/var/run/docker.sock")
    s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
    print("answered:", s.recv(200).decode(errors="replace").split("\r\n")[0], flush=True)
except OSError as exc:
    print("refused:", type(exc).__name__, flush=True)
subprocess.run([sys.argv[1], "20"], executable="/bin/sleep")
"""


@pytest.fixture
def socket_path() -> str:
    """The Docker socket the server's own user can reach (root, or the docker group)."""
    path = host_can_reach_docker()
    require_system("docker", path is not None, "the server's user reaches no docker.sock")
    assert path is not None
    return str(Path(path).resolve())


@pytest.fixture
def workdir() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="gitpilot-sandbox-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def run_with_socket(
    tool: namespaces.Namespaces, socket_path: str, workdir: Path
) -> tuple[str, dict[str, list[str]]]:
    """Run :data:`PING` through ``tool``'s chain with the socket bound in: (stdout, creds)."""
    (workdir / "main.py").write_text(PING)
    name = nonce("groups")
    hidden = LayeredIsolator().hidden_paths()
    argv = tool.wrap(
        [sys.executable, "main.py", name], workdir=workdir, allow_network=False, hidden=hidden
    )
    at = argv.index("--remount-ro")  # while bubblewrap's new root is still writable
    argv[at:at] = ["--bind", socket_path, "/var/run/docker.sock"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir)}
    proc = subprocess.Popen(argv, cwd=workdir, env=env, stdout=subprocess.PIPE, text=True)
    try:
        pid = wait_for_process(name)
        assert pid is not None, "the snippet's sleeper never showed up"
        creds = status_fields(pid)
        for leftover in processes_named(name):
            os.kill(leftover, 9)
        out, _ = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    return out, creds


def test_1_3_a_docker_socket_bound_into_the_run_refuses_it(socket_path: str, workdir: Path) -> None:
    tool, why = namespaces.detect("bwrap")
    assert tool is not None and tool.confine is not None, why
    drops = runs_drop_groups()
    out, creds = run_with_socket(tool, socket_path, workdir)
    if drops:
        # From outside: the run's process has no supplementary group, the engine refused.
        assert creds["Groups"] == [], creds
        assert out.startswith("refused: PermissionError"), out
    else:
        # The disclosed gap (no newuidmap or no subordinate range here): the groups stay.
        assert creds["Groups"] != [] or os.getgroups() == []
    if os.geteuid() != 0:
        # The chain a non-root server had before (and has without newuidmap): same
        # attack, the groups kept, and the engine answers. The attack is real.
        weak = dataclasses.replace(tool, confine=without_idmap(tool.confine, "the control"))
        out, creds = run_with_socket(weak, socket_path, workdir)
        assert creds["Groups"] != [], creds
        assert out.startswith("answered: HTTP/1.0 200 OK"), out


def test_3_without_a_subordinate_range_the_gap_is_said_with_its_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A user with no line in /etc/subuid (the usual case before an admin adds one).
    empty = tmp_path / "subuid"
    empty.write_text("someone-else:100000:65536\n")
    monkeypatch.setattr(confine, "SUBUID_FILE", str(empty))
    monkeypatch.setattr(namespaces, "_CACHE", {})  # probed afresh
    report = LayeredIsolator().report()
    missing = {u["layer"]: u for u in report["unavailable"]}
    if os.geteuid() == 0:
        # Root needs no subordinate range: its runs still drop to nobody with no groups.
        assert "no-groups" in report["layers"] and "no-groups" not in missing
        return
    assert "no-groups" not in report["layers"]
    gap = missing["no-groups"]
    assert f"no subordinate range in {empty}" in gap["reason"], gap
    assert "apt-get install uidmap" in gap["fix"] and "usermod --add-subuids" in gap["fix"]
    # Nor has each run a host uid of its own: said in status and in every plan.
    assert "own-uid" not in report["layers"]
    shared = missing["own-uid"]
    assert "the server's own uid" in shared["reason"] and "pipe buffers" in shared["reason"]
    assert "usermod --add-subuids" in shared["fix"], shared
    gaps = {g["layer"]: g for g in LayeredIsolator().gaps()}
    assert gaps["own-uid"]["reason"] == shared["reason"], gaps
    # A run still works, as the server's uid, and says nothing it does not do.
    result = run(SubprocessSandbox(isolator=LayeredIsolator()), "print(1)")
    assert result.exit_code == 0 and "no-groups" not in result.isolation
    assert "own-uid" not in result.isolation
