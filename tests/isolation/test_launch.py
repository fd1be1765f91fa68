"""How a run is launched: the cgroup join and rlimits in the exec'd command (no ``preexec_fn``,
so CPython can vfork instead of forking the server), or a ``preexec_fn`` where ``prlimit`` or
``/bin/sh`` is missing. Either way the run is in its cgroup and has its limits from the start."""

from __future__ import annotations

import concurrent.futures
import json
import os
import resource
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.diagnostics.isolation import in_run_cgroup
from gitpilot_jupyter.sandbox.local import chainsteps, launches, launchplan
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.cgroups import CgroupRun
from gitpilot_jupyter.sandbox.local.rlimits import MIB, RlimitPlan
from gitpilot_jupyter.sandbox.results import RunResult
from tests.support.processes import wait_for_process

from .conftest import MECHANISMS, SMALL, make_backend, run

#: What a snippet reports from inside: its rlimits. It starts a sleeper named NAME first,
#: whose cgroups (and its parent's: the snippet) the host reads, then kills it.
INSIDE = """
import json, resource, subprocess
subprocess.run([NAME, "30"], executable="/bin/sleep")
names = ("FSIZE", "CPU", "DATA", "NPROC")
print(json.dumps({
    "limits": {n: resource.getrlimit(getattr(resource, "RLIMIT_" + n)) for n in names},
}))
"""


def run_seen_from_outside(backend: SubprocessSandbox) -> tuple[RunResult, dict[str, str]]:
    """Run :data:`INSIDE`; the result and the host's ``/proc/PID/cgroup`` of the snippet
    and of the process it started (a run's own cgroup namespace hides them inside)."""
    name = f"gitpilot-cgroup-{uuid.uuid4().hex[:12]}"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(run, backend, INSIDE.replace("NAME", repr(name)))
        pid = wait_for_process(name)
        assert pid is not None, "the snippet's sleeper never showed up"
        stat = Path(f"/proc/{pid}/stat").read_text()
        parent = int(stat.rpartition(")")[2].split()[1])
        seen = {
            "child": Path(f"/proc/{pid}/cgroup").read_text(),
            "snippet": Path(f"/proc/{parent}/cgroup").read_text(),
        }
        os.kill(pid, 9)
        return future.result(), seen


@pytest.fixture
def no_prlimit(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A machine without ``prlimit``: launches fall back to the ``preexec_fn``."""
    real_which = shutil.which
    monkeypatch.setattr(
        chainsteps.shutil, "which", lambda n, *a, **k: None if n == "prlimit" else real_which(n)
    )
    chainsteps.launch_tools.cache_clear()
    yield
    chainsteps.launch_tools.cache_clear()


def _check_inside(mechanism: str, cgroups: bool) -> None:
    backend = make_backend(mechanism, cgroups=cgroups)
    result, cgroup_files = run_seen_from_outside(backend)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    layers = result.isolation
    for claimed in ("cgroup-memory", "cgroup-pids"):
        if claimed in layers:
            # The snippet and what it starts are in a gitpilot run cgroup of that controller.
            for text in cgroup_files.values():
                assert in_run_cgroup(text.splitlines(), claimed.split("-")[1]), (claimed, text)
    limits = seen["limits"]
    expected = {
        "rlimit-fsize": ("FSIZE", SMALL.max_file_size_mb * MIB),
        "rlimit-data": ("DATA", SMALL.memory_mb * MIB),
        "rlimit-cpu": ("CPU", None),
    }
    for layer, (name, value) in expected.items():
        if layer in layers:
            soft, hard = limits[name]
            assert soft == hard != resource.RLIM_INFINITY, (layer, limits[name])
            if value is not None:
                assert soft == value, (layer, soft, value)
    if "rlimit-nproc" in layers:
        assert limits["NPROC"][0] == limits["NPROC"][1] != resource.RLIM_INFINITY
    if os.geteuid() == 0 and "own-uid" not in layers:
        # Root ignores RLIMIT_NPROC: never claimed, unless the run drops to a uid of its own.
        assert "rlimit-nproc" not in layers


def test_with_bwrap_and_cgroups_a_launch_needs_no_preexec_fn(tmp_path: Path) -> None:
    backend = make_backend("bwrap")
    if "cgroup-pids" not in backend.isolation() and "cgroup-memory" not in backend.isolation():
        pytest.skip(f"no writable cgroup here: {backend.isolator.report()['unavailable']}")
    assert chainsteps.launch_tools() is not None, "/bin/sh and prlimit (util-linux) are expected"
    launch = backend.isolator.prepare(
        [sys.executable, "-c", "pass"], workdir=tmp_path, allow_network=False, limits=SMALL
    )
    try:
        assert launch.preexec_fn is None
        # The staging shell joins the cgroup and sets the limits first, before bwrap starts:
        # no shell of its own before the namespace tool (root has no RLIMIT_NPROC to set).
        # Its first options are the server's lines it runs first (see chain/stage.sh).
        stage = launch.argv.index(launchplan.stage_script()) + 2  # after the script and $0
        lines = []
        while launch.argv[stage] == "--run":
            lines.append(launch.argv[stage + 1])
            stage += 2
        joins = [line for line in lines if line.startswith("echo 0 >")]
        assert joins and lines[: len(joins)] == joins, lines
        assert any(line.startswith("ulimit -f") for line in lines), lines
        assert stage < launch.argv.index(shutil.which("bwrap") or "bwrap")
        if os.geteuid() == 0:
            assert launch.argv[0] == shutil.which("unshare")
    finally:
        launch.cleanup()


def test_a_failed_join_in_the_staging_shell_stops_the_launch(tmp_path: Path) -> None:
    backend = make_backend("bwrap")
    if "cgroup-pids" not in backend.isolation() and "cgroup-memory" not in backend.isolation():
        pytest.skip(f"no writable cgroup here: {backend.isolator.report()['unavailable']}")
    (tmp_path / "inline.py").write_text("print('the snippet ran')")
    launch = backend.isolator.prepare(
        [sys.executable, "inline.py"], workdir=tmp_path, allow_network=False, limits=SMALL
    )
    assert isinstance(launch, launches.LayeredLaunch)
    cgroup = launch._cgroup
    assert cgroup is not None and any("echo 0 >" in a for a in launch.argv)
    try:
        for folder in cgroup.dirs:
            folder.rmdir()  # gone before the chain joins it: the join must fail
        done = subprocess.run(
            launch.argv, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        cgroup.dirs.clear()
        launch.cleanup()
    assert done.returncode != 0
    assert "the snippet ran" not in done.stdout
    assert "tasks" in done.stderr or "cgroup.procs" in done.stderr, done.stderr


def test_without_prlimit_a_launch_falls_back_to_preexec_fn(
    no_prlimit: None, tmp_path: Path
) -> None:
    assert chainsteps.launch_tools() is None
    backend = make_backend("none")
    launch = backend.isolator.prepare(
        [sys.executable, "-c", "pass"], workdir=tmp_path, allow_network=False, limits=SMALL
    )
    try:
        assert launch.preexec_fn is not None
        assert launch.argv == [sys.executable, "-c", "pass"]
    finally:
        launch.cleanup()
    _check_inside("none", True)


@pytest.mark.parametrize("cgroups", [True, False])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_claimed_cgroup_and_rlimit_holds_inside(mechanism: str, cgroups: bool) -> None:
    _check_inside(mechanism, cgroups)


@pytest.mark.parametrize("cgroups", [True, False])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_the_same_holds_on_the_preexec_fn_path(
    no_prlimit: None, mechanism: str, cgroups: bool
) -> None:
    _check_inside(mechanism, cgroups)


def test_a_failed_cgroup_join_stops_the_launch(tmp_path: Path) -> None:
    tools = chainsteps.launch_tools()
    if tools is None:
        pytest.skip("no /bin/sh and prlimit here")
    missing = CgroupRun(version=2, dirs=[tmp_path / "gone"])
    marker = tmp_path / "ran"
    prefix = chainsteps.exec_prefix(tools, RlimitPlan(), missing)
    assert prefix is not None
    done = subprocess.run(
        [*prefix, "touch", str(marker)], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0 and not marker.exists()


def test_prlimit_options_match_the_plan_including_nproc() -> None:
    plan = RlimitPlan(
        limits=[
            (resource.RLIMIT_NPROC, 4000),
            (resource.RLIMIT_DATA, 64 * MIB),
            (resource.RLIMIT_FSIZE, 8 * MIB),
            (resource.RLIMIT_CPU, 60),
        ]
    )
    options = plan.prlimit_options()
    assert options is not None
    for (which, value), option in zip(plan.limits, options, strict=True):
        _, hard = resource.getrlimit(which)
        capped = value if hard == resource.RLIM_INFINITY else min(value, hard)
        assert option.endswith(f"={capped}:{capped}")
    assert [o.split("=")[0] for o in options] == ["--nproc", "--data", "--fsize", "--cpu"]
    assert RlimitPlan(limits=[(resource.RLIMIT_CORE, 0)]).prlimit_options() is None
