"""The Runner stages of ``debug --matrixlab``: health, its Docker, capabilities, a snippet."""

from __future__ import annotations

from typing import Any

from ..errors import SandboxError
from ..service import SandboxService
from .local import HELLO, outcome
from .stage import FAIL, PASS, SKIP, Stage


async def runner_stages(service: SandboxService, probe: SandboxService) -> list[Stage]:
    """Health, Docker behind it, capabilities, token, and a snippet on the Runner."""
    report = await service.test_matrixlab()
    url, hint = report["url"], report.get("hint")
    stages: list[Stage] = []
    if not report["reachable"]:
        stages.append(Stage("runner health", FAIL, report["error"] or "unreachable", hint))
        return stages + [
            Stage(n, SKIP, "the Runner is not reachable")
            for n in ("runner docker", "runner capabilities", "runner snippet")
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
    stages.append(await _runner_snippet(probe, report))
    return stages


async def _runner_snippet(probe: SandboxService, report: dict[str, Any]) -> Stage:
    name = "runner snippet"
    if report["token"] in ("rejected", "required") or not report["docker_ok"]:
        return Stage(name, FAIL, report["error"], report.get("hint"))
    if "matrixlab" not in probe.allowed_backends:
        return Stage(name, SKIP, "the matrixlab backend is not allowed on this server")
    try:
        _, result = await probe.run_approved_here(
            language="python", code=HELLO["python"], backend="matrixlab", timeout_sec=60
        )
    except SandboxError as exc:
        return Stage(name, FAIL, exc.message, report.get("hint"))
    if result.ok and result.stdout.strip() == "4":
        return Stage(name, PASS, f"print(2 + 2) -> 4 in {result.duration_ms} ms")
    return Stage(name, FAIL, outcome(result), "docker logs gitpilot-matrixlab")
