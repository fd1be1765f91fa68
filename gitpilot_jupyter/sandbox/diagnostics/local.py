"""The local stages of ``debug``: settings, hello-world, stdin, timeout kill, approval gate."""

from __future__ import annotations

from ..errors import ApprovalError
from ..request import RunOptions
from ..results import RunResult
from ..service import REQUIRE_APPROVAL_ENV, SandboxService
from .stage import FAIL, PASS, SKIP, Stage, run_probe

HELLO = {
    "python": "print(2 + 2)",
    "javascript": "console.log(2 + 2)",
    "bash": "echo $((2 + 2))",
}
INSTALL_HINT = {
    "python": "reinstall the environment's Python, or set the python interpreter in the config",
    "javascript": "install Node.js (Debian/Ubuntu: sudo apt-get install nodejs)",
    "bash": "install bash (Debian/Ubuntu: sudo apt-get install bash)",
}


def outcome(result: RunResult) -> str:
    """Exit code, duration, timeout and the last stderr line: what a failed stage shows."""
    tail = result.stderr.strip().splitlines()[-1:] or [""]
    return (
        f"exit {result.exit_code}, {result.duration_ms} ms"
        + (", timed out" if result.timed_out else "")
        + (f": {tail[0][:200]}" if tail[0] else "")
    )


async def settings_stage(service: SandboxService) -> Stage:
    """The settings file is usable and no env var is invalid; shadowing vars are named."""
    eff = service.settings.effective()
    path = service.settings.path
    if eff.env_error:
        var = eff.env_error.split("=")[0].split(":")[0]
        return Stage("settings", FAIL, eff.env_error, f"unset {var} (or give it a valid value)")
    if eff.settings_error:
        return Stage("settings", FAIL, eff.settings_error, f"fix or remove {path}")
    shadow = ", ".join(eff.from_env)
    detail = f"backend {eff.settings.backend}; file {path}" + (
        "" if path.exists() else " (not created yet: defaults)"
    )
    if eff.env_override:
        detail += f"; environment overrides the file: {eff.env_override} ({shadow})"
    return Stage("settings", PASS, detail)


async def hello_stage(probe: SandboxService, language: str) -> Stage:
    """``print(2 + 2)`` on the local backend answers 4."""
    name = f"local {language} hello-world"
    if probe.interpreters.resolve(language) is None:
        missing = getattr(probe.interpreters, language)
        status = FAIL if language == "python" else SKIP
        return Stage(name, status, f"{missing!r} is not installed", INSTALL_HINT[language])
    result = await run_probe(
        probe,
        RunOptions(language=language, code=HELLO[language], backend="subprocess", timeout_sec=30),
    )
    if result.ok and result.stdout.strip() == "4":
        return Stage(name, PASS, f"prints 4 in {result.duration_ms} ms")
    fix = "jupyter sandbox status  (then check the interpreter and GITPILOT_SANDBOX_ISOLATION)"
    return Stage(name, FAIL, outcome(result), fix)


async def stdin_stage(probe: SandboxService) -> Stage:
    """``input()`` ends at once with EOFError instead of waiting for the timeout."""
    result = await run_probe(
        probe, RunOptions(language="python", code="input()", backend="subprocess", timeout_sec=10)
    )
    if not result.timed_out and "EOFError" in result.stderr:
        return Stage("stdin is /dev/null", PASS, f"input() -> EOFError in {result.duration_ms} ms")
    return Stage("stdin is /dev/null", FAIL, outcome(result), "report this as a bug")


async def timeout_stage(probe: SandboxService) -> Stage:
    """A snippet killed at its timeout keeps the output it printed before."""
    code = "import time\nprint('before the kill', flush=True)\ntime.sleep(60)"
    result = await run_probe(
        probe, RunOptions(language="python", code=code, backend="subprocess", timeout_sec=1)
    )
    name = "output kept across a timeout kill"
    if result.timed_out and result.exit_code == -1 and "before the kill" in result.stdout:
        return Stage(name, PASS, f"killed after {result.duration_ms} ms, output kept")
    return Stage(name, FAIL, outcome(result), "report this as a bug")


async def approval_stage(service: SandboxService, probe: SandboxService) -> Stage:
    """An unapproved run is refused; an approved one runs."""
    name = "approval gate"
    if not service.require_approval:
        return Stage(
            name,
            SKIP,
            "approval is switched off here: any run goes ahead without one",
            f"unset {REQUIRE_APPROVAL_ENV} (or enable require_approval in the server config)",
        )
    try:
        unapproved = RunOptions(language="python", code="print('unapproved')", backend="subprocess")
        await probe.run(None, expected=unapproved)
    except ApprovalError as exc:
        refused = exc.code
    else:
        return Stage(name, FAIL, "a run without approval went ahead", "report this as a bug")
    result = await run_probe(
        probe, RunOptions(language="python", code="print('approved')", backend="subprocess")
    )
    if result.stdout != "approved\n":
        return Stage(name, FAIL, f"the approved run failed: {outcome(result)}")
    return Stage(name, PASS, f"unapproved run refused ({refused}); approved run ran")
