"""Notebooks run in this virtualenv's ``python3`` kernel, whatever kernelspecs the user has."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(autouse=True)
def venv_kernelspec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the venv's kernelspecs first (JUPYTER_PATH wins over the user's own folder)."""
    monkeypatch.setenv("JUPYTER_PATH", os.path.join(sys.prefix, "share", "jupyter"))
