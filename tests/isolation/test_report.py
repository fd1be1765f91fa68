"""What status says about isolation: the layers in force, and why others are missing."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.diagnostics import PASS
from gitpilot_jupyter.sandbox.diagnostics.isolation import isolation_check
from gitpilot_jupyter.sandbox.errors import ContainmentUnavailable
from gitpilot_jupyter.sandbox.local import namespaces
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.support.system import path_without

from .conftest import MECHANISMS, make_backend, require_mechanism, run


def path_without_bwrap(folder: Path) -> str:
    """A PATH with every program of this one but bwrap."""
    return path_without("bwrap", folder)


def test_status_layers_match_what_a_run_gets(sandbox_config_dir: Path) -> None:
    require_mechanism("bwrap")
    service = SandboxService(settings=SettingsStore(sandbox_config_dir))
    status = asyncio.run(service.status())
    planned = asyncio.run(
        service.plan_and_run(RunOptions(language="python", code="print(1)"), confirmed=True)
    )
    result = planned.result
    assert result is not None
    assert status["isolation"] == result.isolation
    assert status["isolation_report"]["namespaces"] == "bwrap"
    assert status["isolation_report"]["unavailable"] == []
    # With network allowed in the settings, status no longer claims the network namespace.
    asyncio.run(service.configure({"allow_network": True}))
    status = asyncio.run(service.status())
    assert "netns" not in status["isolation"] and "pidns" in status["isolation"]


def test_without_bwrap_status_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_mechanism("unshare")
    monkeypatch.setenv("PATH", path_without_bwrap(tmp_path / "bin"))
    monkeypatch.setattr(namespaces, "bundled_bwrap", lambda: (None, None))
    backend = SubprocessSandbox(isolator=LayeredIsolator("bwrap"))
    report = backend.isolator.report()
    missing = {u["layer"]: u for u in report["unavailable"]}
    assert "bwrap" in missing and "not installed" in missing["bwrap"]["reason"]
    assert "apt-get install bubblewrap" in missing["bwrap"]["fix"]
    assert report["engine"] == "none"
    # Nothing runs uncontained: the run is refused with the reason and the fix.
    assert "cannot keep a snippet away from your files" in missing["containment"]["reason"]
    assert "apt-get install bubblewrap" in missing["containment"]["fix"]
    with pytest.raises(ContainmentUnavailable) as refused:
        run(backend, "print('never runs')")
    assert "GITPILOT_SANDBOX_ALLOW_UNCONTAINED=1" in str(refused.value)


def test_isolation_env_var_caps_the_mechanism(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITPILOT_SANDBOX_ISOLATION", "none")
    report = LayeredIsolator().report()
    assert report["namespaces"] == "none" and report["choice"] == "none"
    reasons = {u["layer"]: u["reason"] for u in report["unavailable"]}
    assert "GITPILOT_SANDBOX_ISOLATION=none" in reasons["namespaces"]
    monkeypatch.setenv("GITPILOT_SANDBOX_ISOLATION", "chroot")
    report = LayeredIsolator().report()
    assert report["choice"] == "auto"
    assert "'chroot' is not one of" in report["unavailable"][0]["reason"]


def test_rlimit_fallback_is_reported_and_enforced() -> None:
    backend = make_backend("none", cgroups=False)
    report = backend.isolator.report()
    missing = {u["layer"] for u in report["unavailable"]}
    assert "cgroups" in missing
    assert report["cgroups"] == "none"
    assert {"rlimit-data", "rlimit-fsize", "rlimit-cpu"} <= set(report["layers"])
    if os.geteuid() == 0:
        assert "rlimit-nproc" in missing and "rlimit-nproc" not in report["layers"]
    # The file size limit (8 MiB in these tests) is really in force.
    code = "open('big', 'wb').write(b'x' * (16 << 20))\nprint('wrote')"
    result = run(backend, code)
    assert result.exit_code != 0 and "wrote" not in result.stdout
    assert "rlimit-fsize" in result.isolation


@pytest.mark.parametrize("cgroups", [True, False])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_every_claimed_layer_is_verified_from_inside(
    mechanism: str, cgroups: bool, sandbox_config_dir: Path
) -> None:
    backend = make_backend(mechanism, cgroups=cgroups)
    service = SandboxService(settings=SettingsStore(sandbox_config_dir), isolator=backend.isolator)
    stage = asyncio.run(isolation_check(service))
    assert stage.status == PASS, stage.detail
    # "uncontained" says what the run did without (the administrator accepted it): no claim.
    claimed = [layer for layer in backend.isolation() if layer not in ("env-scrub", "uncontained")]
    verified = stage.detail.split("verified: ")[1].split(";")[0].split(", ")
    assert sorted(verified) == sorted(claimed)


def test_a_credential_folder_holding_the_interpreter_is_not_claimed_hidden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_mechanism("bwrap")
    home = Path(sys.prefix).parent  # pretend the venv lives in the home's credential folder
    monkeypatch.setenv("GITPILOT_CONFIG_DIR", sys.prefix)
    backend = make_backend("bwrap", home=home)
    result = run(backend, "print('ok')")
    assert (result.exit_code, result.stdout) == (0, "ok\n")
    assert "hidden-credentials" not in result.isolation and "ro-root" in result.isolation


def test_a_delegated_cgroup_that_is_not_there_is_said_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITPILOT_SANDBOX_CGROUP", "/gitpilot-nobody-delegated-this")
    report = LayeredIsolator("none").report()
    missing = [u for u in report["unavailable"] if u["layer"].startswith("cgroup")]
    reasons = " ".join(u["reason"] for u in missing)
    assert "gitpilot-nobody-delegated-this" in reasons and "does not exist" in reasons
    # The fallback is named with what it does not cover, and how to delegate one.
    assert "rlimit-data" in report["layers"] and "cgroup-memory" not in report["layers"]
    assert "memory is capped per process only" in reasons
    assert "GITPILOT_SANDBOX_CGROUP=/gitpilot-" in missing[0]["fix"]
    monkeypatch.setenv("GITPILOT_SANDBOX_CGROUP", "../../escape")
    reasons = " ".join(u["reason"] for u in LayeredIsolator("none").report()["unavailable"])
    assert "is not a cgroup path" in reasons
