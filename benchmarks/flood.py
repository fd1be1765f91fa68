"""Benchmark 3, output flood: 1 GiB on stdout through the REST API.

The server's resident memory is sampled every 10 ms during the run (and its
kernel-kept peak, VmHWM, read before and after); the answer must stop at
exactly the cap; the time is compared with the same program writing to
/dev/null, spawned directly.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from .common import Context, Measure, bare_spawn, plan_and_approve, rss_kb

BENCH = "output flood"
CAP = 512_000
CODE = (
    "import sys\n"
    "chunk = b'x' * (1 << 20)\n"
    "write = sys.stdout.buffer.write\n"
    "for _ in range(1024):\n"
    "    write(chunk)\n"
)


def _sample_rss(pid: int, stop: threading.Event, peak: list[int]) -> None:
    while not stop.is_set():
        peak[0] = max(peak[0], rss_kb(pid)[0])
        time.sleep(0.01)


def _through_cat() -> float:
    """Seconds for the program piped into ``cat > /dev/null``: the floor of any capture."""
    started = time.perf_counter()
    with subprocess.Popen([sys.executable, "-c", CODE], stdout=subprocess.PIPE) as producer:
        subprocess.run(["cat"], stdin=producer.stdout, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def run(ctx: Context) -> list[Measure]:
    """Peak RSS growth, exact truncation, time against /dev/null."""
    server = ctx.server("auto")
    runs = ctx.n(5)
    growth_kb, hwm_growth_kb, seconds, exact = [], [], [], True
    with server.client(timeout=300) as http:
        for _ in range(runs):
            token = plan_and_approve(http, "python", CODE)
            before, hwm_before = rss_kb(server.pid)
            stop, peak = threading.Event(), [before]
            sampler = threading.Thread(target=_sample_rss, args=(server.pid, stop, peak))
            sampler.start()
            started = time.perf_counter()
            answer = http.post(
                "/api/sandbox/run",
                json={"language": "python", "code": CODE, "approval_token": token},
            )
            seconds.append(time.perf_counter() - started)
            stop.set()
            sampler.join()
            result = answer.json()
            exact = exact and (
                len(result["stdout"].encode()) == CAP
                and result["truncated"] is True
                and result["exit_code"] == 0
            )
            growth_kb.append(peak[0] - before)
            hwm_growth_kb.append(rss_kb(server.pid)[1] - hwm_before)
    devnull = sorted(bare_spawn(CODE, devnull=True) for _ in range(runs))[runs // 2]
    piped = sorted(_through_cat() for _ in range(runs))[runs // 2]
    took = sorted(seconds)[runs // 2]
    worst_mb = max(growth_kb) / 1024
    return [
        Measure(
            BENCH,
            "server peak RSS growth (worst run)",
            round(worst_mb, 1),
            "MB",
            target="<= 20 MB",
            ok=worst_mb <= 20,
            note=f"sampled every 10 ms; VmHWM grew {max(hwm_growth_kb) / 1024:.1f} MB",
        ),
        Measure(
            BENCH,
            "answer cut at exactly the cap",
            CAP if exact else 0,
            "bytes",
            target=f"== {CAP}, truncated",
            ok=exact,
        ),
        Measure(
            BENCH,
            "time / same program to /dev/null",
            round(took / devnull, 2),
            "x",
            target="<= 2x",
            ok=took / devnull <= 2,
            note=f"{took:.2f} s vs {devnull:.2f} s (median of {runs})",
        ),
        Measure(
            BENCH,
            "time / same program piped into cat",
            round(took / piped, 2),
            "x",
            note=f"{piped:.2f} s: the floor for any sandbox that reads the output",
        ),
    ]
