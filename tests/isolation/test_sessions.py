"""Sessions: a real IPython kernel in the real sandbox, kept between cells, shut to others.

Each test starts real kernels through the subprocess backend's long-lived launch.
Sessions need the bwrap engine (their sockets are shut by a mount namespace of their
own); on the namespace-free engine they are refused, and that is tested where it runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits
from gitpilot_jupyter.sandbox.errors import SessionNotFound
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.cleanup import remove_orphaned_run_dirs
from gitpilot_jupyter.sandbox.results import MEMORY_EXCEEDED
from gitpilot_jupyter.sandbox.sessions import CellOutcome, SessionManager
from gitpilot_jupyter.sandbox.sessions.kernel import LOST_NOTE

from .conftest import make_backend
from .sessionkit import LIMITS, ROOT, alive, cell, start_request, with_sessions


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
