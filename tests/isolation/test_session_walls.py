"""Sessions shut to others: other runs, sessions and users, the network; hosts that
cannot hold one."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.errors import ContainmentUnavailable, SessionUnavailable
from gitpilot_jupyter.sandbox.languages import Interpreters
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.sessions import SessionManager
from gitpilot_jupyter.sandbox.sessions.boot import PORTS

from .conftest import make_backend
from .sessionkit import cell, start_request, with_sessions

PROBE = """
import json, os, re, socket
out = {{}}
for path in {paths!r}:
    try:
        if re.search(r"[.]kernel-[0-9]$", path):
            socket.socket(socket.AF_UNIX).connect(path)
            out[path] = "connected"
        else:
            os.listdir(path) if not path.endswith(".json") else open(path).read()
            out[path] = "read"
    except OSError as exc:
        out[path] = type(exc).__name__
print(json.dumps(out))
"""


def test_another_run_or_session_cannot_read_the_folder_or_reach_the_sockets(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        kernel = manager._sessions[(None, "nb")].kernel
        folder, pid = str(kernel.workdir), kernel.kernel_pid
        sockets = [kernel.connection.socket(pid, kernel.workdir, port) for port in PORTS]
        inside = [f"{folder}/.kernel-{n}" for n in PORTS.values()]
        paths = [folder, f"{folder}/.kernel.json", *inside, *sockets, f"/proc/{pid}/root{folder}"]
        # The kernel itself sees its sockets where it bound them.
        own = await manager.run_cell(cell("nb", PROBE.format(paths=inside)), user=None)
        assert set(json.loads(own.result.stdout).values()) == {"connected"}
        code = PROBE.format(paths=paths)
        # Another run: none of it exists in its sandbox.
        other = await bwrap.run(
            RunRequest(language="python", code=code, timeout_sec=20, env=start_request().env)
        )
        answers = json.loads(other.stdout)
        assert "read" not in answers.values() and "connected" not in answers.values(), answers
        # Another session: the same.
        await manager.start("other", owner=None, request=start_request())
        probe = await manager.run_cell(cell("other", code), user=None)
        answers = json.loads(probe.result.stdout)
        assert "read" not in answers.values() and "connected" not in answers.values(), answers
        # Another user of the host (not the server's, not the kernel's): no way in either.
        nobody = subprocess.run(
            ["/usr/bin/python3", "-c", code],  # (stdlib only; the venv is root's)
            capture_output=True,
            text=True,
            user=65534,
            group=65534,
            check=False,
            timeout=30,
        )
        answers = json.loads(nobody.stdout)
        assert "read" not in answers.values() and "connected" not in answers.values(), answers

    if os.geteuid() != 0 or not Path("/usr/bin/python3").exists():
        pytest.skip("the other host user is played by root dropping to nobody")
    with_sessions(bwrap, body)


#: The network interfaces a cell sees, and whether it reaches the host's loopback listener.
NETWORK = """
import socket
print(sorted(name for _, name in socket.if_nameindex()))
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
    print("connected")
except OSError as exc:
    print("refused")
"""


def test_network_off_holds_inside_the_session(bwrap: SubprocessSandbox, listener: int) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        outcome = await manager.run_cell(cell("nb", NETWORK.format(port=listener)), user=None)
        assert outcome.result.stdout == "['lo']\nrefused\n", outcome.result.stderr

    with_sessions(bwrap, body)


def test_network_on_is_a_sessions_own_stack_without_the_hosts_loopback(
    bwrap: SubprocessSandbox, listener: int
) -> None:
    refused = bwrap.refusal(allow_network=True)

    async def body(manager: SessionManager) -> None:
        if refused is not None:
            # No stack of its own here (a user without /dev/net/tun): the start is refused,
            # and nothing of the session is left, as a network-on run is refused.
            with pytest.raises(ContainmentUnavailable) as failed:
                await manager.start("nb", owner=None, request=start_request(network=True))
            assert failed.value.code == refused.code == "network_unavailable"
            assert manager.list() == []
            return
        info = await manager.start("nb", owner=None, request=start_request(network=True))
        assert "egress-only" in info["isolation"] and "netns" not in info["isolation"]
        spec = dataclasses.replace(cell("nb", NETWORK.format(port=listener)), network=True)
        outcome = await manager.run_cell(spec, user=None)
        assert outcome.result.stdout == "['lo', 'tap0']\nrefused\n", outcome.result.stderr

    with_sessions(bwrap, body)


def test_a_cell_planned_with_network_does_not_run_in_a_session_without(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        spec = cell("nb", "print(1)")
        with pytest.raises(Exception, match="network off"):
            await manager.run_cell(
                dataclasses.replace(spec, network=True),
                user=None,
            )

    with_sessions(bwrap, body)


def test_an_interpreter_without_ipykernel_is_refused_with_the_fix() -> None:
    python = "/usr/bin/python3"
    probe = subprocess.run([python, "-c", "import ipykernel"], capture_output=True, check=False)
    if not Path(python).exists() or probe.returncode == 0:
        pytest.skip(f"needs a python without ipykernel at {python}")
    bwrap = make_backend("bwrap")
    bwrap.interpreters = Interpreters(python=python)

    async def body(manager: SessionManager) -> None:
        with pytest.raises(SessionUnavailable) as refused:
            await manager.start("nb", owner=None, request=start_request())
        assert refused.value.code == "ipykernel_missing"
        assert f"{python} -m pip install ipykernel" in str(refused.value)

    with_sessions(bwrap, body)


def test_the_namespace_free_engine_refuses_sessions_with_the_reason() -> None:
    backend = make_backend("landlock")

    async def body(manager: SessionManager) -> None:
        with pytest.raises(SessionUnavailable, match="bwrap"):
            await manager.start("nb", owner=None, request=start_request())

    with_sessions(backend, body)


def test_landlock_refuses_a_session_cell_at_plan_time_with_the_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gitpilot_jupyter.sandbox.request import RunOptions
    from gitpilot_jupyter.sandbox.service.service import SandboxService
    from gitpilot_jupyter.sandbox.sync import run_sync

    monkeypatch.setenv("GITPILOT_SANDBOX_ISOLATION", "landlock")
    service = SandboxService()
    engine = service.planner.resolver.subprocess.isolator
    refused = engine.refusal(allow_network=False)
    if engine.engine != "landlock" or refused is not None:
        pytest.skip(f"no landlock engine for plans here: {refused}")
    single = run_sync(service.plan(RunOptions(language="python", code="print(1)")))
    assert single.plan_id  # a single run plans; a session's cell does not
    with pytest.raises(SessionUnavailable) as cell_refused:
        run_sync(service.plan(RunOptions(language="python", code="print(1)", session="nb")))
    assert cell_refused.value.status == 409 and "To fix" in str(cell_refused.value)
