"""Benchmark 4, timeout accuracy: a busy loop with a 1 s timeout, and no survivor.

The snippet first starts a detached grandchild (``sleep`` with a unique
argument, in a new session, so a process-group kill alone would miss it),
then spins. After the answer, no process with that argument may be alive.
"""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from .common import Context, Measure, plan_and_approve

BENCH = "timeout"


def survivors(marker: str) -> list[int]:
    """Pids of processes whose command line contains ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(entry))
    return found


def snippet(marker: str) -> str:
    """A busy loop that first leaves a detached ``sleep`` behind."""
    return (
        "import subprocess\n"
        f"subprocess.Popen(['sleep', '{marker}'], start_new_session=True)\n"
        "while True:\n"
        "    pass\n"
    )


def run(ctx: Context) -> list[Measure]:
    """Worst answer time over the runs, and survivors, for each isolation setting."""
    measures = []
    for isolation in ("none", "auto"):
        worst, left = 0.0, 0
        with ctx.http(isolation) as http:
            for _ in range(ctx.n(10)):
                marker = f"{300 + secrets.randbelow(10**6) / 10**7:.7f}"
                code = snippet(marker)
                token = plan_and_approve(http, "python", code, timeout_sec=1)
                started = time.perf_counter()
                answer = http.post(
                    "/api/sandbox/run",
                    json={
                        "language": "python",
                        "code": code,
                        "timeout_sec": 1,
                        "approval_token": token,
                    },
                ).json()
                worst = max(worst, time.perf_counter() - started)
                assert answer["timed_out"] is True and answer["exit_code"] == -1, answer
                alive = survivors(marker)
                left += len(alive)
                for pid in alive:  # leave the machine clean whatever happened
                    os.kill(pid, 9)
        label = "OS isolation" if isolation == "auto" else "no OS isolation"
        measures += [
            Measure(
                BENCH,
                f"1 s timeout, busy loop: worst answer ({label})",
                round(worst, 3),
                "s",
                target="<= 1.3 s",
                ok=worst <= 1.3,
                note=f"{ctx.n(10)} runs",
            ),
            Measure(
                BENCH,
                f"survivors after the timeout ({label})",
                left,
                "processes",
                target="0",
                ok=left == 0,
                note="a detached grandchild in its own session",
            ),
        ]
    return measures
