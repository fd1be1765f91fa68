"""Processes that leave the run's process group (``setsid``) still die with the run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.local.backends import NullSandbox
from gitpilot_jupyter.sandbox.local.layered import CLEANUP_LAYER, LayeredIsolator
from tests.support.system import require_system

from .conftest import MECHANISMS, make_backend, marked_processes, run

ESCAPE = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print("escaped", flush=True)
{tail}
"""
COMBOS = [(m, True) for m in MECHANISMS] + [(m, False) for m in MECHANISMS]


def escape_code(mechanism: str, tail: str) -> str:
    """The escape for ``mechanism``: the namespace-free engine refuses ``setsid`` (its runs
    cannot leave their session), so there the child stays in it and must die all the same."""
    if mechanism == "landlock":
        return ESCAPE.format(tail=tail).replace(", start_new_session=True", "")
    return ESCAPE.format(tail=tail)


def test_the_namespace_free_engine_refuses_setsid() -> None:
    backend = make_backend("landlock")
    result = run(backend, ESCAPE.format(tail=""), timeout_sec=20)
    assert result.exit_code == 1 and "PermissionError" in result.stderr, result.stderr
    assert "escaped" not in result.stdout


def gone(mark: str, within: float = 5.0) -> bool:
    """True once no process carries ``mark`` (polled, the kill is asynchronous)."""
    deadline = time.monotonic() + within
    while marked_processes(mark):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.parametrize(("mechanism", "cgroups"), COMBOS)
def test_setsid_escapee_is_killed_on_timeout(mechanism: str, cgroups: bool, mark: str) -> None:
    backend = make_backend(mechanism, cgroups=cgroups)
    env = {"PATH": os.environ["PATH"], mark: "1"}
    result = run(backend, escape_code(mechanism, "time.sleep(120)"), timeout_sec=2, env=env)
    assert result.timed_out and result.exit_code == -1
    assert result.stdout == "escaped\n"  # output before the kill is kept
    assert gone(mark), f"left behind: {marked_processes(mark)}"


@pytest.mark.parametrize(("mechanism", "cgroups"), COMBOS[:-1])
def test_escapee_of_a_finished_snippet_is_killed(mechanism: str, cgroups: bool, mark: str) -> None:
    # The snippet exits at once and its escapee is re-parented: only a pid namespace
    # or a cgroup still knows it belongs to the run (not tested with neither).
    backend = make_backend(mechanism, cgroups=cgroups)
    env = {"PATH": os.environ["PATH"], mark: "1"}
    result = run(backend, escape_code(mechanism, ""), timeout_sec=20, env=env)
    assert (result.exit_code, result.timed_out) == (0, False)
    assert gone(mark), f"left behind: {marked_processes(mark)}"


DOUBLE_FORK = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(120)
    os._exit(0)
print("left a daemon", flush=True)
"""


@pytest.mark.parametrize("code", [ESCAPE.format(tail=""), DOUBLE_FORK])
def test_off_kills_what_its_run_left_behind(code: str, mark: str) -> None:
    """``off`` isolates nothing, but a setsid child or daemon of its run dies with it."""
    backend = NullSandbox()
    # Its isolator's look-up, which honours a delegated cgroup (GITPILOT_SANDBOX_CGROUP).
    has_cgroup = CLEANUP_LAYER in backend.isolator.layers()
    require_system("cgroups", has_cgroup, "no cgroup can be made here")
    env = {"PATH": os.environ["PATH"], mark: "1"}
    result = run(backend, code, timeout_sec=20, env=env)
    assert (result.exit_code, result.timed_out) == (0, False), result.stderr
    assert result.isolation == ["tempdir", "env-scrub", CLEANUP_LAYER]
    assert gone(mark), f"left behind: {marked_processes(mark)}"


#: A setsid child and a double-forked daemon, each with the run's mark in its argv (the
#: pool's next slot for the same key carries the mark in its environment too).
LEAVE_BEHIND = """
import os, subprocess, sys
mark = next(k for k in os.environ if k.startswith("GITPILOT_TEST_MARK_")) + "-left"
sleep = [sys.executable, "-c", "import time; time.sleep(120)", mark]
subprocess.Popen(sleep, start_new_session=True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, sleep)
    os._exit(0)
os.wait()
print("left two behind", flush=True)
"""


def _left(mark: str) -> list[int]:
    needle = f"{mark}-left".encode()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if needle in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
    return found


def test_a_warm_run_answers_once_nothing_of_it_is_left(mark: str) -> None:
    """A warm run that ended on its own answers once its sandbox's init has ended,
    which the kernel allows only after every process of the run is gone and reaped:
    what the snippet left running is gone by the answer (not even a zombie is left),
    not a moment later."""
    from .pooling import pooled, request, scenario, the_pool, until

    env = {"PATH": os.environ["PATH"], mark: "1"}
    code = LEAVE_BEHIND.replace('print("left', 'import time; time.sleep(1)\nprint("left')
    seen: list[tuple[bool, int, str, list[int], list[int]]] = []

    async def body(backend: Any) -> None:
        await backend.run(request("pass", env=env))
        await until(lambda: the_pool(backend).idle() >= 1)
        running = asyncio.ensure_future(backend.run(request(code, env=env)))
        await until(lambda: len(_left(mark)) == 2 or running.done(), within=20)
        left = _left(mark)
        result = await running
        still = [pid for pid in left if os.path.exists(f"/proc/{pid}")]
        seen.append((result.warm, result.exit_code, result.stdout, still, left))

    scenario(body, pooled(max_slots=1))
    [(warm, exit_code, stdout, still, left)] = seen
    assert (warm, exit_code, stdout) == (True, 0, "left two behind\n")
    assert len(left) == 2, "the snippet did not leave its two processes"
    assert still == [], f"still there at the answer: {still}"


#: Leaves a process that forks its successor and exits, over and over: a new pid every
#: turn, against a kill that lists the run's processes once (and a look in /proc, which
#: finds its pid gone by the time it reads it).
HOPPER = """
import subprocess, sys, time
hop = "import os\\nos.setsid()\\nwhile True:\\n    if os.fork():\\n        os._exit(0)\\n"
subprocess.Popen([sys.executable, "-c", hop])
time.sleep(1)
print("left a process that changes its pid", flush=True)
"""


def test_a_pid_hopping_process_is_gone_by_a_warm_run_s_answer() -> None:
    """Counted by the run's pids cgroup (one counter, however fast the pids change): more
    than the waiting slot's three processes while the run runs, none at its answer."""
    from .pooling import pooled, request, scenario, the_pool, until

    tree = LayeredIsolator("bwrap").cgroup_tree()  # a delegated one too, as runs get
    has_pids = tree is not None and tree.pids_parent is not None
    require_system("cgroups", has_pids, "no pids cgroup can be made here")
    seen: list[tuple[bool, int, str, int, int]] = []

    async def body(backend: Any) -> None:
        await backend.run(request("pass"))
        await until(lambda: the_pool(backend).idle() >= 1)
        [slot] = [s for q in the_pool(backend)._idle.values() for s in q]
        launch: Any = slot.launch  # a LayeredLaunch: its run cgroup's folders
        counter = next(
            d / "pids.current" for d in launch._cgroup.dirs if (d / "pids.current").exists()
        )
        running = asyncio.ensure_future(backend.run(request(HOPPER)))
        most = 0
        while not running.done():
            most = max(most, int(counter.read_text()))
            await asyncio.sleep(0.01)
        result = await running
        try:
            # cgroup.procs lists live processes only; pids.current also counts one that is
            # dead and not yet reaped (a PID namespace's init, reaped just after its end).
            after = len((counter.parent / "cgroup.procs").read_text().split())
            # And nothing hops on unseen: the counter comes down to none, promptly.
            for _ in range(100):
                if int(counter.read_text()) == 0:
                    break
                await asyncio.sleep(0.01)
            else:
                after = max(after, int(counter.read_text()))
        except FileNotFoundError:  # removed already: only an empty cgroup can be
            after = 0
        seen.append((result.warm, result.exit_code, result.stdout, most, after))

    scenario(body, pooled(max_slots=1))
    [(warm, exit_code, stdout, most, after)] = seen
    assert (warm, exit_code, stdout) == (True, 0, "left a process that changes its pid\n")
    # bubblewrap's monitor and init, the interpreter: 3 wait in a slot; the hopper is more.
    assert most >= 4, f"the hopping process was never counted ({most} at most)"
    assert after == 0, f"{after} processes of the run still there at its answer"
