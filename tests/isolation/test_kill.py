"""Processes that leave the run's process group (``setsid``) still die with the run."""

from __future__ import annotations

import os
import time

import pytest

from gitpilot_jupyter.sandbox.local.backends import NullSandbox
from gitpilot_jupyter.sandbox.local.layered import CLEANUP_LAYER, _cgroup_tree
from tests.support.system import require_system

from .conftest import MECHANISMS, make_backend, marked_processes, run

ESCAPE = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
print("escaped", flush=True)
{tail}
"""
COMBOS = [(m, True) for m in MECHANISMS] + [(m, False) for m in MECHANISMS]


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
    result = run(backend, ESCAPE.format(tail="time.sleep(120)"), timeout_sec=2, env=env)
    assert result.timed_out and result.exit_code == -1
    assert result.stdout == "escaped\n"  # output before the kill is kept
    assert gone(mark), f"left behind: {marked_processes(mark)}"


@pytest.mark.parametrize(("mechanism", "cgroups"), COMBOS[:-1])
def test_escapee_of_a_finished_snippet_is_killed(mechanism: str, cgroups: bool, mark: str) -> None:
    # The snippet exits at once and its escapee is re-parented: only a pid namespace
    # or a cgroup still knows it belongs to the run (not tested with neither).
    backend = make_backend(mechanism, cgroups=cgroups)
    env = {"PATH": os.environ["PATH"], mark: "1"}
    result = run(backend, ESCAPE.format(tail=""), timeout_sec=20, env=env)
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
    require_system("cgroups", _cgroup_tree()[0] is not None, "no cgroup can be made here")
    env = {"PATH": os.environ["PATH"], mark: "1"}
    result = run(NullSandbox(), code, timeout_sec=20, env=env)
    assert (result.exit_code, result.timed_out) == (0, False), result.stderr
    assert result.isolation == ["tempdir", "env-scrub", CLEANUP_LAYER]
    assert gone(mark), f"left behind: {marked_processes(mark)}"
