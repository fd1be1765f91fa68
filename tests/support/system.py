"""Skip a test whose system part is missing, except in CI, where that is a failure.

CI (``CI`` set in the environment, as ``.ci/run`` has it) installs every system
part the tests need (bubblewrap, Docker, chromium, node), so a skip there would
hide a broken install step: it fails instead.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest


def in_ci() -> bool:
    """True when running under ``.ci/run``."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_system(part: str, available: bool, reason: str) -> None:
    """Skip (on a user's machine) or fail (in CI) when ``part`` is not ``available``."""
    if available:
        return
    message = f"{part} is not available here: {reason}"
    if in_ci():
        pytest.fail(f"{message} (CI installs {part}; a skip is not allowed there)", pytrace=False)
    pytest.skip(message)


def path_without(name: str, folder: Path) -> str:
    """A PATH (the one folder ``folder``, made here) holding a link to every program on
    this PATH but ``name``: the host without that tool, everything else as it is."""
    folder.mkdir()
    for entry in os.environ.get("PATH", os.defpath).split(os.pathsep):
        with contextlib.suppress(OSError):
            for program in os.scandir(entry):
                link = folder / program.name
                if program.name != name and not link.exists() and os.access(program, os.X_OK):
                    link.symlink_to(program.path)
    return str(folder)
