"""The kept ``PATH`` look-up answers as ``shutil.which`` does after every kind of change."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.executables import which


def _tool(folder: Path, name: str = "gp-tool") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def two_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.setenv("PATH", f"{first}{os.pathsep}{second}")
    return first, second


def test_answers_as_shutil_which(two_folders: tuple[Path, Path]) -> None:
    _tool(two_folders[1])
    assert which("gp-tool") == shutil.which("gp-tool") == str(two_folders[1] / "gp-tool")
    assert which("gp-tool") == shutil.which("gp-tool")  # the kept answer
    assert which("gp-missing") is None


def test_a_tool_installed_after_a_miss_is_found_at_once(two_folders: tuple[Path, Path]) -> None:
    assert which("gp-tool") is None
    _tool(two_folders[1])
    assert which("gp-tool") == str(two_folders[1] / "gp-tool")


def test_a_removed_tool_is_searched_again(two_folders: tuple[Path, Path]) -> None:
    first, second = two_folders
    _tool(first)
    _tool(second)
    assert which("gp-tool") == str(first / "gp-tool")
    (first / "gp-tool").unlink()
    assert which("gp-tool") == str(second / "gp-tool")
    (second / "gp-tool").unlink()
    assert which("gp-tool") is None


def test_a_tool_no_longer_executable_or_replaced_is_searched_again(
    two_folders: tuple[Path, Path],
) -> None:
    first, second = two_folders
    tool = _tool(first)
    _tool(second)
    assert which("gp-tool") == str(tool)
    tool.chmod(0o644)
    assert which("gp-tool") == shutil.which("gp-tool") == str(second / "gp-tool")
    # The one kept now replaced by a folder of the same name (a new inode).
    replaced = second / "gp-tool"
    replaced.unlink()
    replaced.mkdir()
    assert not stat.S_ISREG(replaced.stat().st_mode)
    assert which("gp-tool") == shutil.which("gp-tool") is None


def test_a_changed_path_is_searched_again(
    two_folders: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = two_folders
    _tool(first)
    _tool(second)
    assert which("gp-tool") == str(first / "gp-tool")
    monkeypatch.setenv("PATH", str(second))
    assert which("gp-tool") == str(second / "gp-tool")
