"""Benchmark 5, streaming latency: from ``print`` in the snippet to the REST client.

The snippet prints its wall clock time (flushed) every 50 ms; the client reads
the NDJSON stream and subtracts each stamp from the time the line arrived (one
machine, one clock).
"""

from __future__ import annotations

import json
import time

from .common import NDJSON, Context, Measure, percentile, plan_and_approve

BENCH = "streaming"
LINES = 40
CODE = (
    "import time\n"
    f"for _ in range({LINES}):\n"
    "    print(repr(time.time()), flush=True)\n"
    "    time.sleep(0.05)\n"
)


def run(ctx: Context) -> list[Measure]:
    """p50 and p99 latency of a printed line reaching the client."""
    latencies: list[float] = []
    with ctx.http("auto") as http:
        for _ in range(ctx.n(10) // 3 + 1):
            token = plan_and_approve(http, "python", CODE)
            body = {"language": "python", "code": CODE, "approval_token": token}
            with http.stream(
                "POST", "/api/sandbox/run", json=body, headers={"Accept": NDJSON}
            ) as answer:
                for line in answer.iter_lines():
                    arrived = time.time()
                    event = json.loads(line)
                    if event["type"] != "stdout":
                        continue
                    for stamp in event["data"].split():
                        latencies.append(arrived - float(stamp))
    p50 = percentile(latencies, 50)
    return [
        Measure(
            BENCH,
            "printed line -> REST client, p50",
            round(p50 * 1000, 1),
            "ms",
            target="<= 50 ms",
            ok=p50 <= 0.05,
            note=f"{len(latencies)} lines; p99 {percentile(latencies, 99) * 1000:.1f} ms",
        )
    ]
