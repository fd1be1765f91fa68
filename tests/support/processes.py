"""Find the processes a test's snippet started, as the host sees them (by argv[0])."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path


def processes_named(name: str) -> list[int]:
    """Host pids whose argv[0] is ``name``."""
    found = []
    needle = name.encode() + b"\0"
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{entry}/cmdline").read_bytes().startswith(needle):
                    found.append(int(entry))
    return found


def wait_for_process(name: str, timeout: float = 15.0) -> int | None:
    """The pid of the first process named ``name`` to appear within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = processes_named(name)
        if pids:
            return pids[0]
        time.sleep(0.05)
    return None
