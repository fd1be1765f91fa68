"""The host's files: read-only outside the run's temp dir, private /tmp, credentials hidden."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.languages import Interpreters
from gitpilot_jupyter.sandbox.local.isolation import CONTAINED_ENGINES
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.service.planner import HOME_AND_SECRETS
from gitpilot_jupyter.sandbox.settings import SettingsStore

from .conftest import MECHANISMS, make_backend, run

PROBE = """
import json, os
out = {}
for path in json.loads(os.environ["PROBE_PATHS"]):
    try:
        out[path] = sorted(os.listdir(path)) if os.path.isdir(path) else open(path).read()
    except OSError as exc:
        out[path] = type(exc).__name__
print(json.dumps(out))
"""


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside /tmp (which the sandbox replaces) that the test can see."""
    folder = Path(tempfile.mkdtemp(prefix="gitpilot-isolation-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_writing_outside_the_temp_dir_fails(mechanism: str, outside: Path) -> None:
    backend = make_backend(mechanism)
    target = outside / "written-by-snippet"
    code = f"open({str(target)!r}, 'w').write('x')\nprint('wrote')"
    result = run(backend, code)
    if mechanism == "bwrap":
        # The host folder is not even in the run's view (an allowlist of system folders).
        assert {"ro-root", "fs-allowlist"} <= set(result.isolation)
        assert result.exit_code == 1 and "No such file or directory" in result.stderr
        assert not target.exists()
        # What is in the view is read-only.
        system = run(backend, "open('/usr/written-by-snippet', 'w')")
        assert system.exit_code == 1 and "Read-only file system" in system.stderr
        assert not Path("/usr/written-by-snippet").exists()
    elif mechanism == "landlock":
        # The host folder is outside the Landlock allowlist; so is writing to /usr.
        assert "fs-allowlist" in result.isolation and "ro-root" not in result.isolation
        assert result.exit_code == 1 and "PermissionError" in result.stderr
        assert not target.exists()
        system = run(backend, "open('/usr/written-by-snippet', 'w')")
        assert system.exit_code == 1 and "PermissionError" in system.stderr
        assert not Path("/usr/written-by-snippet").exists()
    else:
        # Without bubblewrap the host is writable (root here): never claimed.
        assert "ro-root" not in result.isolation
        assert result.stdout == "wrote\n" and target.exists()
    # The run's own folder is always writable.
    local = run(backend, "open('mine.txt', 'w').write('x')\nprint(open('mine.txt').read())")
    assert (local.exit_code, local.stdout) == (0, "x\n")


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_tmp_is_private_with_bubblewrap(mechanism: str) -> None:
    backend = make_backend(mechanism)
    name = f"gitpilot-private-tmp-{uuid.uuid4().hex}"
    host_file = Path("/tmp") / name
    host_file.write_text("host secret")
    try:
        code = f"import os\nprint(os.path.exists('/tmp/{name}'))\nopen('/tmp/{name}.new','w')"
        result = run(backend, code)
        created = Path("/tmp") / f"{name}.new"
        if mechanism == "landlock":
            # No private /tmp (status and the plan say so), and the host's is out of reach.
            assert "private-tmp" not in result.isolation
            assert result.exit_code == 1 and "PermissionError" in result.stderr
            assert not created.exists()
            probe = run(backend, f"print(open('/tmp/{name}').read())")
            assert probe.exit_code == 1 and "PermissionError" in probe.stderr
            return
        assert result.exit_code == 0, result.stderr
        private = "private-tmp" in result.isolation
        assert private == (mechanism == "bwrap")
        assert result.stdout == f"{not private}\n"
        assert created.exists() != private
    finally:
        host_file.unlink()
        (Path("/tmp") / f"{name}.new").unlink(missing_ok=True)


def home_check(service: SandboxService, language: str = "python") -> dict[str, object]:
    """The plan's line on the home folder, ``~/.ssh`` and the server's secret files."""
    plan = service.planner.describe(RunOptions(language=language, code="echo 1"))
    found = [
        c for c in plan.checks if "~/.ssh" in c["label"] or "holds the interpreter" in c["label"]
    ]
    assert len(found) == 1, plan.checks
    return dict(found[0])


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_credential_folders_are_hidden(
    mechanism: str, outside: Path, monkeypatch: pytest.MonkeyPatch, sandbox_config_dir: Path
) -> None:
    home = outside / "home"
    files = {
        ".gitpilot/settings.json": '{"sandbox": {"matrixlab_token": "secret"}}',
        ".ssh/id_ed25519": "PRIVATE KEY",
        ".aws/credentials": "[default]\naws_secret_access_key = x",
        ".docker/config.json": '{"auths": {}}',
        ".config/gcloud/credentials.db": "x",
        ".local/share/jupyter/runtime/jpserver-1.json": '{"token": "t"}',
        ".netrc": "machine example.invalid password p",
    }
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    (home / "notes.txt").write_text("not a credential")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GITPILOT_CONFIG_DIR", str(home / ".gitpilot"))
    backend = make_backend(mechanism)
    paths = [str(home / rel) for rel in files] + [str(home / "notes.txt"), str(home / ".ssh")]
    env = {"PATH": os.environ["PATH"], "PROBE_PATHS": json.dumps(paths)}
    result = run(backend, PROBE, env=env)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    # The plan says before approval what the run below shows: hidden only behind a wall.
    service = SandboxService(settings=SettingsStore(sandbox_config_dir), isolator=backend.isolator)
    walled = mechanism in CONTAINED_ENGINES
    assert home_check(service) == {
        "label": f"{HOME_AND_SECRETS} hidden"
        if walled
        else f"{HOME_AND_SECRETS} NOT hidden: this host's engine has no file-system wall "
        "(see jupyter sandbox status)",
        "ok": walled,
    }
    if mechanism == "bwrap":
        assert "hidden-credentials" in result.isolation
        for rel in files:
            assert seen[str(home / rel)] == "FileNotFoundError", rel
        # Nothing of the home folder is in the view, not even what is no credential.
        assert seen[str(home / "notes.txt")] == "FileNotFoundError"
        assert seen[str(home / ".ssh")] == "FileNotFoundError"
    elif mechanism == "landlock":
        # The home folder is outside the allowlist: every read is refused.
        assert "hidden-credentials" in result.isolation
        for path in paths:
            assert seen[path] == "PermissionError", path
    else:
        assert seen[str(home / "notes.txt")] == "not a credential"
        assert "hidden-credentials" not in result.isolation
        assert seen[str(home / ".ssh/id_ed25519")] == "PRIVATE KEY"


@pytest.mark.parametrize("mechanism", CONTAINED_ENGINES)
def test_a_credential_folder_holding_the_interpreter_is_never_claimed_hidden(
    mechanism: str, outside: Path, monkeypatch: pytest.MonkeyPatch, sandbox_config_dir: Path
) -> None:
    home = outside / "home"
    folder = home / ".docker" / "bin"
    folder.mkdir(parents=True)
    for opened in (outside, home, home / ".docker", folder):  # a run's own uid enters it
        opened.chmod(0o755)
    bash = folder / "bash"
    shutil.copy2(shutil.which("bash") or "/bin/bash", bash)
    monkeypatch.setenv("HOME", str(home))
    backend = make_backend(mechanism)
    backend.interpreters = Interpreters(bash=str(bash))
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir),
        isolator=backend.isolator,
        interpreters=backend.interpreters,
    )
    check = home_check(service, "bash")
    assert check == {"label": "~/.docker NOT fully hidden: it holds the interpreter", "ok": False}
    if mechanism == "bwrap":  # (the namespace-free engine's wall does not let it start)
        # The run says the same of itself: its credentials layer is not claimed.
        result = run(backend, "echo ran", language="bash")
        assert result.stdout == "ran\n", result.stderr
        assert "hidden-credentials" not in result.isolation and "fs-allowlist" in result.isolation


def test_an_interpreter_under_tmp_is_bound_back() -> None:
    # /tmp is the run's own; an interpreter installed below the host's /tmp (a CI venv,
    # a tool unpacked there) must still be there, read-only.
    backend = make_backend("bwrap")
    folder = Path(tempfile.mkdtemp(prefix="gitpilot-interp-", dir="/tmp"))
    try:
        folder.chmod(0o755)
        (folder / "bin").mkdir(mode=0o755)
        bash = folder / "bin" / "bash"
        shutil.copy2(shutil.which("bash") or "/bin/bash", bash)
        backend.interpreters = Interpreters(bash=str(bash))
        result = run(backend, f"echo ran; echo x > {bash} || echo read-only", language="bash")
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "ran\nread-only\n"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
