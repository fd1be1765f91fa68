"""The diagnostics stages in-process: each failure is found and named with its fix."""

from __future__ import annotations

import asyncio
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits
from gitpilot_jupyter.sandbox.diagnostics import (
    FAIL,
    PASS,
    SKIP,
    probe_service,
    render_text,
    run_diagnostics,
)
from gitpilot_jupyter.sandbox.diagnostics.isolation import cgroup_join_stage, isolation_check
from gitpilot_jupyter.sandbox.diagnostics.local import approval_stage, settings_stage
from gitpilot_jupyter.sandbox.inputs import StagedInput
from gitpilot_jupyter.sandbox.local import cgroups
from gitpilot_jupyter.sandbox.local.chainsteps import SHELL
from gitpilot_jupyter.sandbox.local.isolation import Isolator, Launch
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.support.system import require_system


class LyingIsolator(Isolator):
    """Claims a read-only root and a network namespace, enforces neither (an accepted
    uncontained isolator, or it would be refused before the check could catch it)."""

    def __init__(self) -> None:
        super().__init__(allow_uncontained=True)

    def prepare(
        self,
        argv: list[str],
        *,
        workdir: Path,
        allow_network: bool,
        limits: ResourceLimits,
        inputs: Sequence[StagedInput] = (),
    ) -> Launch:
        return Launch(argv=list(argv), layers=["ro-root", "netns"])


def make_service(config_dir: Path, **options: Any) -> SandboxService:
    return SandboxService(settings=SettingsStore(config_dir), **options)


def test_a_full_walk_leaves_no_trace_in_the_users_service(sandbox_config_dir: Path) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    service = make_service(sandbox_config_dir, audit=lambda e, d: events.append((e, d)))
    found = asyncio.run(run_diagnostics(service, matrixlab=False))
    names = [s.name for s in found]
    assert names[:3] == ["settings", "local python hello-world", "local javascript hello-world"]
    assert {"stdin is /dev/null", "output kept across a timeout kill", "approval gate"} <= set(
        names
    )
    assert {"isolation layers", "run cgroup join", "isolation check"} <= set(names)
    assert all(s.status in (PASS, FAIL, SKIP) for s in found)
    assert events == []  # no plan, approval or run reached the user's audit log
    assert service.plans.pending() == []
    assert not (sandbox_config_dir / "settings.json").exists()
    text = render_text(found)
    assert text.splitlines()[0].startswith(("PASS  settings", "FAIL  settings"))


def test_a_corrupt_settings_file_fails_with_its_path(sandbox_config_dir: Path) -> None:
    path = sandbox_config_dir / "settings.json"
    path.write_text("{not json")
    stage = asyncio.run(settings_stage(make_service(sandbox_config_dir)))
    assert stage.status == FAIL and "not valid JSON" in stage.detail
    assert stage.fix == f"fix or remove {path}"
    assert path.read_text() == "{not json"  # read-only: no backup, no rewrite
    assert sorted(p.name for p in sandbox_config_dir.iterdir()) == ["settings.json"]


def test_an_unknown_backend_in_the_env_fails_with_unset(
    sandbox_config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITPILOT_SANDBOX", "docker")
    stage = asyncio.run(settings_stage(make_service(sandbox_config_dir)))
    assert stage.status == FAIL and "'docker'" in stage.detail
    assert stage.fix is not None and stage.fix.startswith("unset GITPILOT_SANDBOX")


def test_approval_switched_off_is_a_skip_that_says_so(sandbox_config_dir: Path) -> None:
    service = make_service(sandbox_config_dir, require_approval=False)
    stage = asyncio.run(approval_stage(service, probe_service(service)))
    assert stage.status == SKIP and "switched off" in stage.detail
    assert stage.fix is not None and "GITPILOT_SANDBOX_REQUIRE_APPROVAL" in stage.fix


def test_a_claimed_layer_that_does_not_hold_fails_the_check(sandbox_config_dir: Path) -> None:
    service = make_service(sandbox_config_dir, isolator=LyingIsolator())
    stage = asyncio.run(isolation_check(service))
    assert stage.status == FAIL
    assert "claimed but not in force: ro-root, netns" in stage.detail


def test_a_backend_the_server_does_not_allow_is_skipped(sandbox_config_dir: Path) -> None:
    service = make_service(sandbox_config_dir, allowed_backends=["matrixlab"])
    found = {s.name: s for s in asyncio.run(run_diagnostics(service))}
    hello = found["local python hello-world"]
    assert hello.status == SKIP and "not allowed" in hello.detail
    assert found["approval gate"].status == SKIP


def test_the_cgroup_join_stage_times_a_real_join(sandbox_config_dir: Path) -> None:
    service = make_service(sandbox_config_dir, isolator=LayeredIsolator())
    tree = LayeredIsolator().cgroup_tree()
    require_system("cgroups", tree is not None, "no run cgroup can be made here")
    assert tree is not None
    stage = asyncio.run(cgroup_join_stage(service))
    assert stage.status == PASS
    assert re.fullmatch(
        rf"cgroup v{tree.version}: \+\d+\.\d ms to each cold run's start "
        r"\(a warm slot pays it ahead\).*",
        stage.detail,
    )
    # Each timed start joined its cgroup (the shell stops at a failed write): a join
    # file that cannot be written fails the measure instead of timing nothing.
    made = cgroups.CgroupTree.create

    def unjoinable(self: cgroups.CgroupTree, limits: ResourceLimits | None) -> cgroups.CgroupRun:
        run = made(self, limits)
        run.join_files = lambda: run.dirs[:1]  # type: ignore[method-assign]  # a folder
        return run

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cgroups.CgroupTree, "create", unjoinable)
        with pytest.raises(subprocess.CalledProcessError):
            cgroups.join_cost_ms(tree, SHELL, rounds=1)


def test_a_slow_join_names_the_mount_option_that_lifts_it(
    sandbox_config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = make_service(sandbox_config_dir, isolator=LayeredIsolator())
    require_system("cgroups", LayeredIsolator().cgroup_tree() is not None, "no run cgroup here")
    # What cgroup v2 costs on a kernel without favordynmods (9.9 ms measured on this kind
    # of host); the stage's wording of it, not the kernel's, is under test here.
    monkeypatch.setattr(cgroups, "join_cost_ms", lambda tree, shell: 9.9)
    stage = asyncio.run(cgroup_join_stage(service))
    assert stage.status == PASS and "+9.9 ms" in stage.detail
    assert "RCU grace period" in stage.detail and "favordynmods" in stage.detail


def test_the_cgroup_join_stage_is_skipped_without_run_cgroups(sandbox_config_dir: Path) -> None:
    stage = asyncio.run(cgroup_join_stage(make_service(sandbox_config_dir, isolator=Isolator())))
    assert stage.status == SKIP and "no cgroup" in stage.detail
