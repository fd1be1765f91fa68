"""The Runner stages of ``debug --matrixlab``: health, Docker, capabilities, snippet, timeout."""

from __future__ import annotations

from typing import Any

from ..errors import SandboxError
from ..request import RunOptions
from ..service import SandboxService
from .local import HELLO, outcome
from .stage import FAIL, PASS, SKIP, Stage, run_probe

#: The timeout of the Runner timeout check, in seconds.
TIMEOUT_CHECK_SEC = 2


async def runner_stages(service: SandboxService, probe: SandboxService) -> list[Stage]:
    """Health, Docker behind it, capabilities, token, and a snippet on the Runner."""
    report = await service.matrixlab.test_connection()
    url, hint = report["url"], report.get("hint")
    stages: list[Stage] = []
    if not report["reachable"]:
        stages.append(Stage("runner health", FAIL, report["error"] or "unreachable", hint))
        return [
            *stages,
            *[
                Stage(n, SKIP, "the Runner is not reachable")
                for n in (
                    "runner docker",
                    "runner capabilities",
                    "runner snippet",
                    "runner timeout",
                )
            ],
            network_on_stage(service),
        ]
    stages.append(
        Stage(
            "runner health",
            PASS,
            f"{url} answers in {report['latency_ms']} ms, version {report['version']}",
        )
    )
    if report["docker_ok"]:
        stages.append(Stage("runner docker", PASS, "the Runner's Docker daemon works"))
    else:
        stages.append(Stage("runner docker", FAIL, report["error"], hint))
    if report["code_run"] and report["workspace_run"]:
        stages.append(Stage("runner capabilities", PASS, "offers /code/run and /run"))
    else:
        offered = report.get("endpoints")
        stages.append(
            Stage("runner capabilities", FAIL, f"endpoints: {offered}", report.get("hint"))
        )
    snippet = await _runner_snippet(probe, report)
    stages.append(snippet)
    if snippet.status == PASS:
        stages.append(await _runner_timeout(probe))
    else:
        stages.append(Stage("runner timeout", SKIP, "the snippet did not run on the Runner"))
    return [*stages, network_on_stage(service)]


def network_on_stage(service: SandboxService) -> Stage:
    """Whether a network-on run may go to the Runner: the plan's refusal when it may not
    (a setting, not a failure: the administrator says the Runner isolates its network)."""
    name = "runner network-on"
    refused = service.backends.backend("matrixlab").refusal(allow_network=True)
    if refused is not None:
        return Stage(name, SKIP, refused.message)
    return Stage(
        name, PASS, "allowed: the administrator says the Runner isolates its containers' network"
    )


async def _runner_snippet(probe: SandboxService, report: dict[str, Any]) -> Stage:
    name = "runner snippet"
    if report["token"] in ("rejected", "required") or not report["docker_ok"]:
        return Stage(name, FAIL, report["error"], report.get("hint"))
    if "matrixlab" not in probe.backends.allowed_backends:
        return Stage(name, SKIP, "the matrixlab backend is not allowed on this server")
    try:
        result = await run_probe(
            probe,
            RunOptions(
                language="python", code=HELLO["python"], backend="matrixlab", timeout_sec=60
            ),
        )
    except SandboxError as exc:
        return Stage(name, FAIL, exc.message, report.get("hint"))
    if result.ok and result.stdout.strip() == "4":
        return Stage(name, PASS, f"print(2 + 2) -> 4 in {result.duration_ms} ms")
    return Stage(name, FAIL, outcome(result), "docker logs gitpilot-matrixlab")


async def _runner_timeout(probe: SandboxService) -> Stage:
    """A snippet killed at its own timeout on the Runner: timed out, output kept, on time.

    The Runner's timeout counts its container's start and its own flag believes any
    exit 124: this is the check that the backend's own clock decides, as locally.
    """
    name = "runner timeout"
    code = "import sys, time\nprint('before the kill', flush=True)\nsys.stderr.write('err')\n"
    code += "sys.stderr.flush()\ntime.sleep(60)"
    try:
        result = await run_probe(
            probe,
            RunOptions(
                language="python", code=code, backend="matrixlab", timeout_sec=TIMEOUT_CHECK_SEC
            ),
        )
    except SandboxError as exc:
        return Stage(name, FAIL, exc.message, "docker logs gitpilot-matrixlab")
    on_time = TIMEOUT_CHECK_SEC * 1000 <= result.duration_ms < (TIMEOUT_CHECK_SEC + 2) * 1000
    if (
        result.timed_out
        and result.exit_code == -1
        and result.stdout == "before the kill\n"
        and result.stderr == "err"
        and on_time
    ):
        return Stage(name, PASS, f"killed after {result.duration_ms} ms, output kept")
    return Stage(
        name,
        FAIL,
        outcome(result),
        "the Runner's image needs bash 5 and coreutils `timeout` (see docs/admin/matrixlab.md)",
    )
