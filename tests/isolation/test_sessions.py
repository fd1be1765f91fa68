"""Sessions: a real IPython kernel in the real sandbox, kept between cells, shut to others.

Each test starts real kernels through the subprocess backend's long-lived launch.
Sessions need the bwrap engine (their sockets are shut by a mount namespace of their
own); on the namespace-free engine they are refused, and that is tested where it runs.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.errors import SessionNotFound, SessionUnavailable
from gitpilot_jupyter.sandbox.languages import Interpreters
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.cleanup import remove_orphaned_run_dirs
from gitpilot_jupyter.sandbox.results import MEMORY_EXCEEDED
from gitpilot_jupyter.sandbox.rich import DISPLAY_STREAM, DisplayCaps, parse_display
from gitpilot_jupyter.sandbox.rich.wire import BACKEND_MODULE
from gitpilot_jupyter.sandbox.sessions import CellOutcome, SessionManager
from gitpilot_jupyter.sandbox.sessions.boot import PORTS
from gitpilot_jupyter.sandbox.sessions.kernel import LOST_NOTE
from gitpilot_jupyter.sandbox.spec import RunSpec
from tests.support.system import require_system

from .conftest import make_backend

#: Room for the kernel itself (about 60 MiB) and a cell's work.
LIMITS = ResourceLimits(memory_mb=256, max_processes=64, max_file_size_mb=8)
ROOT = Path(__file__).resolve().parents[2]


def start_request(*, network: bool = False, limits: ResourceLimits = LIMITS) -> RunRequest:
    """What a session is started with: its network, limits and environment."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    return RunRequest(
        language="python", code="", timeout_sec=0, allow_network=network, env=env, limits=limits
    )


def cell(name: str, code: str, *, timeout_sec: int = 20) -> RunSpec:
    """The approved spec of one cell of session ``name``."""
    return RunSpec(
        language="python",
        code=code,
        stdin=None,
        timeout_sec=timeout_sec,
        network=False,
        backend="subprocess",
        session=name,
    )


def with_sessions(
    backend: SubprocessSandbox,
    body: Callable[[SessionManager], Awaitable[None]],
    **kwargs: Any,
) -> None:
    """Run ``body`` with a manager on ``backend``; every session is stopped after."""

    async def main() -> None:
        manager = SessionManager(backend, **kwargs)
        try:
            await body(manager)
        finally:
            await manager.aclose()

    asyncio.run(main())


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "Z"


@pytest.fixture
def bwrap() -> SubprocessSandbox:
    return make_backend("bwrap")


def test_state_persists_across_cells_and_outputs_come_back_as_for_a_run(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        info = await manager.start("nb", owner="alice", request=start_request())
        assert "netns" in info["isolation"] and "cgroup-memory" in info["isolation"]
        streamed: list[tuple[str, str]] = []

        async def on_output(stream: str, text: str) -> None:
            streamed.append((stream, text))

        first = await manager.run_cell(cell("nb", "import math\nx = 41"), user="alice")
        assert first.result.exit_code == 0, first.result.stderr
        second = await manager.run_cell(
            cell(
                "nb", "import sys\nprint('out', x)\nprint('err', file=sys.stderr)\nmath.sqrt(x + 8)"
            ),
            user="alice",
            on_output=on_output,
        )
        result = second.result
        assert (result.exit_code, result.stdout, result.stderr) == (0, "out 41\n", "err\n")
        assert second.outputs == [
            {
                "output_type": "display_data",
                "data": {"text/plain": "7.0"},
                "metadata": {},
                "stdout_at": len("out 41\n"),
            }
        ]
        assert ("stdout", "out 41\n") in streamed and ("stderr", "err\n") in streamed
        assert any(stream == "display" and '"7.0"' in text for stream, text in streamed)
        assert result.isolation == info["isolation"] and result.sandbox_id == "nb"
        # Files in its folder persist too, and an error is the cell's, not the session's.
        await manager.run_cell(cell("nb", "open('kept.txt', 'w').write('yes')"), user="alice")
        failed = await manager.run_cell(cell("nb", "1 / 0"), user="alice")
        assert failed.result.exit_code == 1 and "ZeroDivisionError" in failed.result.stderr
        assert "\x1b[" not in failed.result.stderr  # no terminal colours in the envelope
        again = await manager.run_cell(
            cell("nb", "print(open('kept.txt').read(), x)"), user="alice"
        )
        assert again.result.stdout == "yes 41\n" and not again.lost

    with_sessions(bwrap, body)


def test_restart_clears_the_state(bwrap: SubprocessSandbox) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        await manager.run_cell(cell("nb", "x = 1"), user=None)
        await manager.restart("nb", user=None)
        after = await manager.run_cell(cell("nb", "print('x' in dir())"), user=None)
        assert after.result.stdout == "False\n"

    with_sessions(bwrap, body)


def test_a_cell_past_its_timeout_is_interrupted_and_the_session_kept(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        await manager.run_cell(cell("nb", "x = 5"), user=None)
        started = time.monotonic()
        slow = await manager.run_cell(
            cell("nb", "import time\ntime.sleep(60)", timeout_sec=1), user=None
        )
        assert time.monotonic() - started < 10
        assert slow.result.timed_out and slow.result.exit_code == -1 and not slow.lost
        assert "KeyboardInterrupt" in slow.result.stderr
        # Stopped by someone (a face's Stop): the same interrupt, answered cancelled.
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.5, stop.set)
        stopped = await manager.run_cell(cell("nb", "while True: pass"), user=None, stop=stop)
        assert stopped.result.cancelled and not stopped.lost
        kept = await manager.run_cell(cell("nb", "print(x)"), user=None)
        assert kept.result.stdout == "5\n"

    with_sessions(bwrap, body)


def test_a_cell_that_ignores_the_interrupt_ends_its_session_reported_lost(
    bwrap: SubprocessSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("gitpilot_jupyter.sandbox.sessions.kernel.INTERRUPT_GRACE_SEC", 1.0)

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        stuck = "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)"
        outcome = await manager.run_cell(cell("nb", stuck, timeout_sec=1), user=None)
        assert outcome.lost and outcome.result.timed_out and LOST_NOTE in outcome.result.notes
        assert manager.list() == []
        with pytest.raises(SessionNotFound):
            await manager.run_cell(cell("nb", "1"), user=None)

    with_sessions(bwrap, body)


def test_the_memory_cap_holds_for_the_whole_session_and_ends_it_clearly(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request(limits=LIMITS))
        kernel = manager._sessions[(None, "nb")].kernel
        # Two cells, each under the cap: the second goes over it with the first's memory.
        first = await manager.run_cell(cell("nb", "a = bytearray(120 * 2**20)"), user=None)
        assert first.result.exit_code == 0, first.result.stderr
        over = await manager.run_cell(cell("nb", "b = bytearray(120 * 2**20)"), user=None)
        assert over.lost and LOST_NOTE in over.result.notes
        assert over.result.stderr.endswith(MEMORY_EXCEEDED) and over.result.exit_code == 137
        assert not alive(kernel.kernel_pid) and not kernel.workdir.exists()

    with_sessions(bwrap, body)


def test_an_idle_session_is_stopped_and_nothing_of_it_is_left(bwrap: SubprocessSandbox) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        kernel = manager._sessions[(None, "nb")].kernel
        await manager.run_cell(cell("nb", "x = 1"), user=None)  # a cell sets the timer again
        await asyncio.sleep(0.5)
        assert [s["name"] for s in manager.list()] == ["nb"]
        for _ in range(60):
            if not manager.list() and not kernel.workdir.exists():
                break
            await asyncio.sleep(0.1)
        assert manager.list() == [] and not kernel.workdir.exists()
        assert not alive(kernel.kernel_pid)

    with_sessions(bwrap, body, idle_sec=lambda: 1.5)


def test_stop_leaves_no_process_folder_or_cgroup(bwrap: SubprocessSandbox) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        kernel = manager._sessions[(None, "nb")].kernel
        await manager.run_cell(
            cell("nb", "import subprocess\nsubprocess.Popen(['sleep', '600'])"), user=None
        )
        pids = [kernel.process.pid, *kernel.process.descendants()]
        assert len(pids) >= 3  # the chain, the kernel, its child
        cgroup = Path(f"/proc/{kernel.kernel_pid}/cgroup").read_text()
        await manager.stop("nb", user=None)
        assert not any(alive(pid) for pid in pids)
        assert not kernel.workdir.exists()
        for line in cgroup.splitlines():
            hierarchy, path = line.split(":", 2)[1], line.split(":", 2)[2]
            if "gitpilot" in path:
                base = (
                    f"/sys/fs/cgroup/{hierarchy.replace('name=', '')}"
                    if hierarchy
                    else "/sys/fs/cgroup"
                )
                assert not Path(base + path).exists(), path
        with pytest.raises(SessionNotFound):
            await manager.stop("nb", user=None)

    with_sessions(bwrap, body)


def test_another_identity_can_neither_see_nor_drive_a_session(bwrap: SubprocessSandbox) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner="alice", request=start_request())
        assert manager.list("bob") == [] and len(manager.list("alice")) == 1
        for act in (
            manager.run_cell(cell("nb", "print(1)"), user="bob"),
            manager.stop("nb", user="bob"),
            manager.restart("nb", user="bob"),
        ):
            with pytest.raises(SessionNotFound):
                await act
        with pytest.raises(SessionNotFound):
            manager.interrupt("nb", user="bob")
        # Bob's own session of the same name is his, apart from Alice's.
        await manager.start("nb", owner="bob", request=start_request())
        await manager.run_cell(cell("nb", "who = 'alice'"), user="alice")
        bobs = await manager.run_cell(cell("nb", "print('who' in dir())"), user="bob")
        assert bobs.result.stdout == "False\n"

    with_sessions(bwrap, body)


#: Each path: a socket is connected to, a folder listed, a file read; the answer is what
#: happened ("connected", "read") or the error's name.
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
    require_system(
        "slirp4netns",
        bwrap.isolator.refusal(allow_network=True) is None,
        "no egress-only network for bwrap runs here",
    )

    async def body(manager: SessionManager) -> None:
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


SERVER = """
import asyncio, os, sys
sys.path.insert(0, {root!r})
from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.sessions import SessionManager

async def main():
    manager = SessionManager(SubprocessSandbox(isolator=LayeredIsolator("bwrap")))
    request = RunRequest(language="python", code="", timeout_sec=0,
                         env={{"PATH": os.environ["PATH"]}}, limits=ResourceLimits(memory_mb=256))
    await manager.start("nb", owner=None, request=request)
    kernel = manager._sessions[(None, "nb")].kernel
    print(kernel.kernel_pid, kernel.workdir, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


def test_a_server_killed_leaves_no_session_process_and_its_folder_is_swept() -> None:
    make_backend("bwrap")  # (skips where bwrap is missing)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER.format(root=str(ROOT))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        pid_text, folder = server.stdout.readline().split()
        pid = int(pid_text)
        assert alive(pid) and Path(folder).exists()
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        for _ in range(100):
            if not alive(pid):
                break
            time.sleep(0.05)
        assert not alive(pid)
        # The next server's sweep: the folder of a server that is gone goes.
        remove_orphaned_run_dirs(str(Path(folder).parent))
        assert not Path(folder).exists()
    finally:
        server.kill()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()


def test_twenty_sessions_at_once(bwrap: SubprocessSandbox) -> None:
    async def body(manager: SessionManager) -> None:
        names = [f"s{i}" for i in range(20)]
        for name in names:  # one after the other: two cores shared with others
            await manager.start(name, owner=None, request=start_request())
        outcomes: list[CellOutcome] = await asyncio.gather(
            *(manager.run_cell(cell(n, f"name = {n!r}"), user=None) for n in names)
        )
        assert all(o.result.exit_code == 0 for o in outcomes)
        answers = await asyncio.gather(
            *(manager.run_cell(cell(n, "print(name)"), user=None) for n in names)
        )
        assert [a.result.stdout for a in answers] == [f"{n}\n" for n in names]
        assert len({s["name"] for s in manager.list()}) == 20

    with_sessions(bwrap, body)


def test_a_kernel_started_ahead_is_handed_out_fresh_and_removed_at_close(
    bwrap: SubprocessSandbox,
) -> None:
    bwrap.pool_config = dataclasses.replace(bwrap.pool_config, mode="auto")
    folders: list[Path] = []

    async def body(manager: SessionManager) -> None:
        await manager.start("a", owner="alice", request=start_request())
        await manager.run_cell(cell("a", "secret = 'alice'"), user="alice")
        ahead = manager.spare._ahead
        assert ahead is not None  # the next start's kernel is on its way
        waiting = await asyncio.shield(ahead.task)
        started = time.monotonic()
        await manager.start("b", owner="bob", request=start_request())
        assert time.monotonic() - started < 1.0  # (a cold start takes a second or more)
        bob, alice = (
            manager._sessions[("bob", "b")].kernel,
            manager._sessions[("alice", "a")].kernel,
        )
        assert bob is waiting and bob.name == "b"
        assert bob.connection.key != alice.connection.key
        fresh = await manager.run_cell(cell("b", "print('secret' in dir())"), user="bob")
        assert fresh.result.stdout == "False\n" and fresh.result.sandbox_id == "b"
        # Another request (network, limits or environment): not that kernel, a new one.
        other = start_request(limits=ResourceLimits(memory_mb=300, max_processes=64))
        ahead = manager.spare._ahead
        assert ahead is not None
        waiting = await asyncio.shield(ahead.task)
        await manager.start("c", owner=None, request=other)
        assert manager._sessions[(None, "c")].kernel is not waiting
        folders.extend([waiting.workdir, bob.workdir, alice.workdir])
        ahead = manager.spare._ahead
        assert ahead is not None
        folders.append((await asyncio.shield(ahead.task)).workdir)

    with_sessions(bwrap, body)
    assert folders and not any(folder.exists() for folder in folders)


def test_no_kernel_is_started_ahead_with_the_pool_off() -> None:
    backend = make_backend("bwrap")
    assert backend.pool_config.mode == "off"  # (the tests' environment)

    async def body(manager: SessionManager) -> None:
        await manager.start("a", owner=None, request=start_request())
        assert manager.spare._ahead is None

    with_sessions(backend, body)


def test_a_session_stopped_during_a_cell_answers_that_cell_lost(bwrap: SubprocessSandbox) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        kernel = manager._sessions[(None, "nb")].kernel
        running = asyncio.ensure_future(
            manager.run_cell(cell("nb", "import time\ntime.sleep(60)"), user=None)
        )
        await asyncio.sleep(1.0)
        started = time.monotonic()
        await manager.stop("nb", user=None)
        outcome = await asyncio.wait_for(running, 10)
        assert outcome.lost and time.monotonic() - started < 10
        assert LOST_NOTE in outcome.result.notes and outcome.result.exit_code == -1
        assert not kernel.workdir.exists() and not alive(kernel.kernel_pid)

    with_sessions(bwrap, body)


def test_an_interrupt_stops_the_cell_under_way_and_keeps_the_session(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        await manager.run_cell(cell("nb", "x = 7"), user=None)
        running = asyncio.ensure_future(
            manager.run_cell(cell("nb", "import time\ntime.sleep(60)"), user=None)
        )
        await asyncio.sleep(1.0)
        manager.interrupt("nb", user=None)
        outcome = await asyncio.wait_for(running, 10)
        result = outcome.result
        assert result.exit_code == 1 and "KeyboardInterrupt" in result.stderr and not outcome.lost
        kept = await manager.run_cell(cell("nb", "print(x)"), user=None)
        assert kept.result.stdout == "7\n"

    with_sessions(bwrap, body)


def test_a_cell_whose_caller_goes_away_is_interrupted(bwrap: SubprocessSandbox) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        running = asyncio.ensure_future(
            manager.run_cell(cell("nb", "import time\ntime.sleep(60)\ndone = 1"), user=None)
        )
        await asyncio.sleep(1.0)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        started = time.monotonic()
        after = await manager.run_cell(cell("nb", "print('done' in dir())"), user=None)
        assert after.result.stdout == "False\n" and time.monotonic() - started < 10

    with_sessions(bwrap, body)


def test_a_cells_displays_are_checked_as_a_runs_and_come_back_in_its_outputs(
    bwrap: SubprocessSandbox,
) -> None:
    pytest.importorskip("matplotlib", reason="the kernel's matplotlib is this interpreter's")

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request(limits=LIMITS))
        streamed: list[dict[str, Any]] = []

        async def on_output(stream: str, text: str) -> None:
            if stream == DISPLAY_STREAM:
                streamed.append(parse_display(text))

        # The kernel runs without the display shim: no nonce, ipykernel's own matplotlib.
        env = await manager.run_cell(
            cell(
                "nb",
                "import os, sys\nprint(os.environ.get('GITPILOT_DISPLAY'), "
                "os.environ.get('MPLBACKEND'), sys.argv[-1])",
            ),
            user=None,
        )
        assert env.result.stdout.split()[:2] == [
            "None",
            "module://matplotlib_inline.backend_inline",
        ]
        assert BACKEND_MODULE not in env.result.stdout, env.result.stdout
        plot = await manager.run_cell(
            cell(
                "nb",
                "import matplotlib.pyplot as plt\nprint('before')\n"
                "plt.plot([1, 2, 3]); plt.show()\nprint('after')\n6 * 7",
            ),
            user=None,
            on_output=on_output,
        )
        result = plot.result
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "before\nafter\n" and not result.notes
        image, last = result.outputs
        assert image["output_type"] == "display_data" and image["stdout_at"] == len("before\n")
        assert base64.b64decode(image["data"]["image/png"]).startswith(b"\x89PNG")
        assert last["data"] == {"text/plain": "42"} and last["stdout_at"] == len(result.stdout)
        assert streamed == result.outputs and result.to_dict()["outputs"] == result.outputs
        script = await manager.run_cell(
            cell(
                "nb",
                "from IPython.display import display\n"
                "display({'application/javascript': 'alert(1)'}, raw=True)\n"
                "display({'application/javascript': 'alert(2)', 'text/plain': 'shown'}, raw=True)",
            ),
            user=None,
        )
        assert script.result.outputs == [
            {
                "output_type": "display_data",
                "data": {"text/plain": "shown"},
                "metadata": {},
                "stdout_at": 0,
            }
        ]
        assert script.result.notes == [
            "1 display output dropped: no allowed MIME type (it had: application/javascript)",
            "application/javascript left out of a display output: not an allowed type",
        ]

    with_sessions(bwrap, body)


def test_a_cells_display_past_its_cap_is_dropped_with_the_note(bwrap: SubprocessSandbox) -> None:
    big = dataclasses.replace(LIMITS, memory_mb=768, display=DisplayCaps(item_mb=8))

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request(limits=big))
        # 100 MB of (valid) base64 PNG text, then a small display the cell still shows.
        over = await manager.run_cell(
            cell(
                "nb",
                "from IPython.display import display\n"
                "display({'image/png': 'A' * (100 * 2**20)}, raw=True)\n"
                "display({'text/plain': 'small'}, raw=True)",
                timeout_sec=60,
            ),
            user=None,
        )
        assert over.result.exit_code == 0 and not over.lost, over.result.stderr
        assert [item["data"] for item in over.result.outputs] == [{"text/plain": "small"}]
        assert over.result.notes == [
            "1 display output dropped: larger than 8 MB (max_display_item_mb)"
        ]

    with_sessions(bwrap, body)


def test_a_sessions_display_count_cap_holds_per_cell(bwrap: SubprocessSandbox) -> None:
    few = dataclasses.replace(LIMITS, display=DisplayCaps(outputs=3))

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request(limits=few))
        code = "for n in range(5):\n    display(n)"
        for _ in range(2):  # the next cell has its own count
            shown = await manager.run_cell(cell("nb", code), user=None)
            assert [item["data"] for item in shown.result.outputs] == [
                {"text/plain": str(n)} for n in range(3)
            ]
            assert shown.result.notes == [
                "2 display outputs dropped: a run keeps at most 3 (max_display_outputs)"
            ]

    with_sessions(bwrap, body)
