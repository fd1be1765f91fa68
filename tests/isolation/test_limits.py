"""Memory and process limits: a memory hog is killed and reported, a fork bomb is contained."""

from __future__ import annotations

import os
import time

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits
from gitpilot_jupyter.sandbox.local.backends import NullSandbox
from gitpilot_jupyter.sandbox.local.isolation import Isolator

from .conftest import MECHANISMS, SMALL, make_backend, marked_processes, run

HOG = """
chunks = []
for i in range(60):
    chunks.append(b"x" * (8 << 20))  # touched, so it is really resident
print("survived", len(chunks) * 8, "MiB")
"""
MODEST = 'data = b"x" * (24 << 20)\nprint("fine", len(data) >> 20)'
# Every process forks forever; failed forks back off so the CPU stays usable.
FORK_BOMB = """
import os, time
print("bomb", flush=True)
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.05)
"""


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_memory_hog_is_killed_and_reported_with_a_cgroup(mechanism: str) -> None:
    backend = make_backend(mechanism)
    layers = backend.isolation()
    if "cgroup-memory" not in layers:
        pytest.skip(f"no writable memory cgroup here: {backend.isolator.report()['unavailable']}")
    result = run(backend, HOG)
    assert "cgroup-memory" in result.isolation
    assert "survived" not in result.stdout
    assert result.exit_code != 0 and not result.timed_out
    assert "memory limit exceeded" in result.stderr
    # The same limit leaves a modest snippet alone, and says nothing about memory.
    fine = run(backend, MODEST)
    assert (fine.exit_code, fine.stdout) == (0, "fine 24\n")
    assert "memory limit" not in fine.stderr


def test_landlock_runs_one_after_another_get_cgroups_of_their_own_limits() -> None:
    # A namespace-free run's cgroup is made ahead, after the run before (cgroups.SPARES):
    # by its own limits, never the last run's.
    backend = make_backend("landlock")
    if "cgroup-memory" not in backend.isolation():
        pytest.skip(f"no writable memory cgroup here: {backend.isolator.report()['unavailable']}")
    roomy = ResourceLimits(memory_mb=1024, max_processes=32, max_file_size_mb=8)
    for limits in (SMALL, roomy, roomy, SMALL, roomy):
        result = run(backend, HOG, limits=limits)
        survived = (result.exit_code, result.stdout) == (0, "survived 480 MiB\n")
        assert survived is (limits is roomy), (limits, result.stdout, result.stderr)


def test_without_a_cgroup_the_memory_rlimit_gives_memory_error() -> None:
    backend = make_backend("none", cgroups=False)
    result = run(backend, HOG)
    assert "rlimit-data" in result.isolation and "cgroup-memory" not in result.isolation
    assert "MemoryError" in result.stderr and "survived" not in result.stdout
    assert "memory limit exceeded" not in result.stderr  # not a kill: not reported as one


def test_the_off_backend_has_no_limits_at_all() -> None:
    backend = NullSandbox()
    # At most a cgroup that limits nothing, to kill what the run leaves behind.
    assert isinstance(backend.isolator, Isolator)
    assert backend.isolator.layers() in ([], ["cgroup-cleanup"])
    result = run(backend, 'data = b"x" * (160 << 20)\nprint("ok")', limits=ResourceLimits(64, 8, 1))
    assert (result.exit_code, result.stdout) == (0, "ok\n")
    assert result.isolation == ["tempdir", "env-scrub", *backend.isolator.layers()]


@pytest.mark.parametrize(
    ("mechanism", "cgroups"), [(m, True) for m in MECHANISMS] + [("none", False)]
)
def test_fork_bomb_is_contained_and_the_next_run_is_fine(
    mechanism: str, cgroups: bool, mark: str
) -> None:
    backend = make_backend(mechanism, cgroups=cgroups)
    layers = backend.isolation()
    if not {"cgroup-pids", "rlimit-nproc"} & set(layers):
        # Never set a fork bomb loose without a process limit: status must say why.
        missing = {u["layer"] for u in backend.isolator.report()["unavailable"]}
        assert {"cgroups", "rlimit-nproc"} <= missing
        return
    env = {"PATH": os.environ["PATH"], mark: "1"}
    started = time.monotonic()
    result = run(backend, FORK_BOMB, timeout_sec=3, limits=SMALL, env=env)
    assert result.timed_out and result.exit_code == -1
    assert result.stdout.startswith("bomb")
    assert time.monotonic() - started < 20
    assert marked_processes(mark) == []
    after = run(backend, "print('next run')")
    assert (after.exit_code, after.stdout) == (0, "next run\n")
