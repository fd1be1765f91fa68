"""Fixtures for the core's tests: a service on a private settings folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore


@pytest.fixture
def service(sandbox_config_dir: Path, tmp_path: Path) -> SandboxService:
    """An in-process service rooted in a temp folder."""
    return SandboxService(settings=SettingsStore(sandbox_config_dir), root_dir=tmp_path)


def interpreter_installed(language: str) -> bool:
    """Whether the interpreter a language needs is on PATH."""
    return (
        shutil.which({"python": "python3", "javascript": "node", "bash": "bash"}[language])
        is not None
    )
