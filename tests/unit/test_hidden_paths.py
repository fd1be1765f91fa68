"""The credential paths a bwrap run gets covered: kept per environment, looked at every run.

Where credentials could be is worked out once per environment and home folder
(:meth:`LayeredIsolator.hidden_paths`); each of these proves a change takes effect
on the very next call, with no restart and no waiting.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local.isolation import Isolator
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore


def _isolator(env: dict[str, str], home: Path | None = None) -> LayeredIsolator:
    return LayeredIsolator("none", cgroups=False, environ=env, home=home)


def test_a_credential_folder_made_after_a_call_is_hidden_by_the_next(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    isolator = _isolator({"HOME": str(home)}, home)
    assert home / ".ssh" not in isolator.hidden_paths()[0]
    (home / ".ssh").mkdir()
    (home / ".netrc").write_text("machine x login y password z")
    dirs, files = isolator.hidden_paths()
    assert home / ".ssh" in dirs
    assert home / ".netrc" in files
    (home / ".ssh").rmdir()
    assert home / ".ssh" not in isolator.hidden_paths()[0]


def test_a_changed_environment_variable_takes_effect_at_once(tmp_path: Path) -> None:
    home, config = tmp_path / "home", tmp_path / "elsewhere" / "jupyter-config"
    home.mkdir()
    config.mkdir(parents=True)
    env = {"HOME": str(home)}
    isolator = _isolator(env, home)
    assert config not in isolator.hidden_paths()[0]
    env["JUPYTER_CONFIG_DIR"] = str(config)
    assert config in isolator.hidden_paths()[0]
    env["GITPILOT_CONFIG_DIR"] = str(tmp_path / "elsewhere")
    assert tmp_path / "elsewhere" in isolator.hidden_paths()[0]
    del env["JUPYTER_CONFIG_DIR"], env["GITPILOT_CONFIG_DIR"]
    assert not {config, tmp_path / "elsewhere"} & set(isolator.hidden_paths()[0])


def test_a_new_home_folder_takes_effect_at_once(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for home in (first, second):
        (home / ".aws").mkdir(parents=True)
    env = {"HOME": str(first)}
    isolator = _isolator(env)  # the home folder from HOME, as a server has it
    assert first / ".aws" in isolator.hidden_paths()[0]
    env["HOME"] = str(second)
    dirs = isolator.hidden_paths()[0]
    assert second / ".aws" in dirs
    assert first / ".aws" not in dirs


def test_a_re_pointed_credential_link_is_followed_at_once(tmp_path: Path) -> None:
    home, old, new = tmp_path / "home", tmp_path / "old-keys", tmp_path / "new-keys"
    for folder in (home, old, new):
        folder.mkdir()
    os.symlink(old, home / ".ssh")
    isolator = _isolator({"HOME": str(home)}, home)
    assert old in isolator.hidden_paths()[0]
    (home / ".ssh").unlink()
    os.symlink(new, home / ".ssh")
    dirs = isolator.hidden_paths()[0]
    assert new in dirs
    assert old not in dirs


class _Changing(dict[str, str]):
    """An environment another thread changes while it is read."""

    def items(self):  # type: ignore[override]
        raise RuntimeError("dictionary changed size during iteration")


def test_an_environment_changing_while_read_is_worked_out_each_time(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    env = _Changing(HOME=str(home))
    isolator = _isolator(env, home)
    assert home / ".kube" in isolator.hidden_paths()[0]
    config = tmp_path / "config"
    config.mkdir()
    env["JUPYTER_CONFIG_DIR"] = str(config)  # nothing was kept: seen at once
    assert config in isolator.hidden_paths()[0]


def test_a_change_to_the_servers_own_environment_takes_effect_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server's os.environ (what a server's isolator reads), changed in place.
    config, home = tmp_path / "jupyter-config", tmp_path / "home"
    config.mkdir()
    (home / ".docker").mkdir(parents=True)
    isolator = LayeredIsolator("none", cgroups=False)
    assert config not in isolator.hidden_paths()[0]
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(config))
    assert config in isolator.hidden_paths()[0]
    monkeypatch.setenv("HOME", str(home))
    assert home / ".docker" in isolator.hidden_paths()[0]
    monkeypatch.delenv("JUPYTER_CONFIG_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    dirs = isolator.hidden_paths()[0]
    assert config not in dirs and home / ".docker" not in dirs


class _WalledElsewhere(Isolator):
    """An engine of its own (no LayeredIsolator) with a file-system wall, whose runs hide
    one folder: the one the interpreter is in."""

    def __init__(self, hidden: Path) -> None:
        super().__init__(allow_uncontained=False)
        self.hidden = hidden

    def layers(self, *, allow_network: bool = False) -> list[str]:
        return ["fs-allowlist", "hidden-credentials"]

    def refusal(self, *, allow_network: bool = False) -> None:
        return None

    def hidden_paths(self) -> tuple[list[Path], list[Path]]:
        return [self.hidden], []


def test_the_plans_home_check_asks_any_isolator_what_its_runs_hide(
    tmp_path: Path, sandbox_config_dir: Path
) -> None:
    interpreter = Path(sys.executable).resolve()
    isolator = _WalledElsewhere(interpreter.parent)
    service = SandboxService(settings=SettingsStore(sandbox_config_dir), isolator=isolator)
    plan = service.planner.describe(RunOptions(language="python", code="print(1)"))
    (check,) = [c for c in plan.checks if "holds the interpreter" in c["label"]]
    assert check["ok"] is False
    assert check["label"].endswith(
        f"/{interpreter.parent.name} NOT fully hidden: it holds the interpreter"
    )
    # The isolator with no wall hides nothing, and says so.
    assert Isolator().hidden_paths() == ((), ())
