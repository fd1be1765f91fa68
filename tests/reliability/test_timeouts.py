"""Timeouts hold even when a snippet leaves a detached process holding its pipes.

The snippet starts ``sleep`` in a new session (so killing the run's process
group misses it), with the run's stdout and stderr, then spins past its 1 s
timeout. The answer must come at once, not when the ``sleep`` ends; on the
isolated backend, and on ``off`` where a cgroup per run can be made, nothing may
survive the run.
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import pytest

from .conftest import Live


def _with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("backend", ["subprocess", "off"])
def test_timeout_is_kept_despite_a_detached_grandchild(live: Live, backend: str) -> None:
    marker = f"{600 + secrets.randbelow(10**6) / 10**7:.7f}"  # sleep's argument, unique
    code = (
        "import subprocess\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "while True:\n"
        "    pass\n"
    )
    started = time.monotonic()
    answer = live.run("python", code, timeout_sec=1, backend=backend)
    took = time.monotonic() - started
    survivors = _with_marker(marker)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["timed_out"] is True and result["exit_code"] == -1, result
    assert took < 5, f"the answer took {took:.1f} s: it waited for the detached process"
    if backend == "subprocess" or "cgroup-cleanup" in result["isolation"]:
        # `off` isolates nothing, but its per-run cgroup (where one can be made) kills too.
        assert survivors == [], f"a process of the run outlived it on {backend}"
    else:
        # `off` without a cgroup: the setsid escapee lives on, found here (as documented).
        assert len(survivors) == 1
