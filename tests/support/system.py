"""Skip a test whose system part is missing, except in CI, where that is a failure.

CI (``CI`` set in the environment, as ``.ci/run`` has it) installs every system
part the tests need (bubblewrap, Docker, chromium, node), so a skip there would
hide a broken install step: it fails instead.
"""

from __future__ import annotations

import os

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
