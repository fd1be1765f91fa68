"""The same snippet gives the same envelope on `subprocess` and `matrixlab`, through the service.

The stand-in plays Runner 0.1.0 with a container start of 0.8 s inside the Runner's
timeout (``slow-start``, the slowest start measured on the real Runner), so every
case also proves that the start does not eat the snippet's own time. Each case is
named after the behaviour it holds the two backends to; the cases the Runner makes
impossible to match assert the difference ``docs/admin/matrixlab.md`` documents.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
from dataclasses import dataclass

import pytest

from gitpilot_jupyter.sandbox.errors import BackendFailure
from gitpilot_jupyter.sandbox.matrixlab.config import KEPT_NOTE
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.rich import NOT_ON_MATRIXLAB
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.support.runs import run_here
from tests.support.standin_fixture import StartStandin

#: The plan's line saying that the Runner hands no out/ files back.
FILES_OUT_GAP = "files out: out/ is not handed back on matrixlab"
COMPARED = ("exit_code", "stdout", "stderr", "timed_out", "truncated", "language")
CONTAINER_START_SEC = 0.8


@dataclass(frozen=True)
class Case:
    language: str
    code: str
    stdin: str | None = None
    timeout: int = 10


CASES = {
    "exit-code-and-both-streams": Case(
        "python", "import sys\nprint('out')\nsys.stderr.write('err\\n')\nsys.exit(3)"
    ),
    "stdin": Case("python", "print(input()[::-1])", "olleh\n"),
    "no-stdin-is-eof": Case("python", "try:\n    input()\nexcept EOFError:\n    print('eof')"),
    "stdin-over-1000000-characters": Case(
        "python", "import sys\nprint(len(sys.stdin.read()))", "x" * 1_000_001
    ),
    "unicode": Case("python", "print('héllo wörld ✓')"),
    "output-cap": Case("python", "print('é' * 400_000)"),
    "timeout-after-stdout": Case(
        "python", "import time\nprint('before', flush=True)\ntime.sleep(30)", timeout=2
    ),
    # Runner 0.1.0 answers 500 "can't concat str to bytes" for this one.
    "timeout-after-stderr": Case(
        "python",
        "import sys, time\nprint('out', flush=True)\nsys.stderr.write('err')\n"
        "sys.stderr.flush()\ntime.sleep(30)",
        timeout=2,
    ),
    # The Runner's own flag calls both of these timed out.
    "stderr-says-TIMEOUT": Case("python", "import sys\nsys.stderr.write('TIMEOUT')"),
    "exit-124": Case("bash", "echo done; exit 124"),
    # The Runner's timeout counts the container's start too: 0.5 s + the 0.8 s start is over
    # the timeout (the case was 0.7 s; 0.5 leaves room for a loaded machine).
    "finished-0.5-s-snippet-with-timeout-1": Case(
        "python", "import time\ntime.sleep(0.5)\nprint('finished')", timeout=1
    ),
    "bash": Case("bash", "echo hi; echo oops >&2; exit 5"),
    "javascript": Case("javascript", "console.log([1, 2].map(x => x * 21).join(','))"),
}


@pytest.fixture
def parity_service(service: SandboxService, start_standin: StartStandin) -> SandboxService:
    runner = start_standin(mode="slow-start", token="parity-token", delay=CONTAINER_START_SEC)
    service.settings.update({"matrixlab_url": runner.url, "matrixlab_token": runner.token})
    return service


async def run_both(service: SandboxService, case: Case) -> dict[str, RunResult]:
    results = {}
    for backend in ("subprocess", "matrixlab"):
        plan, result = await run_here(
            service,
            language=case.language,
            code=case.code,
            stdin=case.stdin,
            timeout_sec=case.timeout,
            backend=backend,
        )
        assert plan.command == result.command
        results[backend] = result
    return results


@pytest.mark.parametrize("name", list(CASES))
async def test_subprocess_and_matrixlab_agree(parity_service: SandboxService, name: str) -> None:
    case = CASES[name]
    if case.language == "javascript" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    results = await run_both(parity_service, case)
    local, remote = results["subprocess"], results["matrixlab"]
    assert {k: getattr(remote, k) for k in COMPARED} == {k: getattr(local, k) for k in COMPARED}
    assert remote.backend == "matrixlab" and remote.sandbox_id is not None
    assert local.sandbox_id is None
    # The command names the file as the container's tracebacks do.
    files = {"python": "main.py", "javascript": "main.js", "bash": "main.sh"}
    assert remote.command[1] == f"/workspace/{files[case.language]}"
    if remote.timed_out:
        assert remote.exit_code == -1 and 2000 <= remote.duration_ms < 4000


async def test_tracebacks_agree_and_name_the_file_the_command_names(
    parity_service: SandboxService,
) -> None:
    results = await run_both(parity_service, Case("python", "print('a')\n1 / 0"))
    local, remote = results["subprocess"], results["matrixlab"]
    assert (remote.exit_code, remote.stdout) == (local.exit_code, local.stdout) == (1, "a\n")
    assert re.sub(r'"[^"]*/inline.py"', "FILE", local.stderr) == re.sub(
        r'"[^"]*/main.py"', "FILE", remote.stderr
    )
    # The stand-in runs in a temp folder where the Runner's container has /workspace.
    assert remote.command == ["python", "/workspace/main.py"] and '/main.py"' in remote.stderr


async def test_code_read_from_a_file_runs_under_that_files_name_on_both(
    parity_service: SandboxService,
) -> None:
    """`jupyter sandbox run lesson/hello_sandbox.py` sends the code and the file's name."""
    for backend, where in (("subprocess", ""), ("matrixlab", "/workspace/")):
        plan, result = await run_here(
            parity_service,
            language="python",
            code="print('a')\n1 / 0",
            filename="lesson/hello_sandbox.py",
            backend=backend,
        )
        assert plan.goal == "Run hello_sandbox.py"
        assert result.command == plan.command == ["python", f"{where}hello_sandbox.py"]
        assert '/hello_sandbox.py", line 2' in result.stderr and result.stdout == "a\n"


async def test_carriage_returns_become_newlines_on_the_runner(
    parity_service: SandboxService,
) -> None:
    """Documented difference: the Runner captures output as text with universal newlines."""
    case = Case("python", "import sys\nsys.stdout.write('a\\r\\nb\\rc\\n')")
    results = await run_both(parity_service, case)
    assert results["subprocess"].stdout == "a\r\nb\rc\n"
    assert results["matrixlab"].stdout == "a\nb\nc\n"


async def test_output_that_is_not_utf8_is_a_runner_error(parity_service: SandboxService) -> None:
    """Documented difference: the Runner fails such a run (exit 999); locally it is replaced."""
    code = "import sys\nsys.stdout.buffer.write(b'ok \\xff\\n')"
    _, local = await run_here(parity_service, language="python", code=code, backend="subprocess")
    assert local.exit_code == 0 and local.stdout == "ok \ufffd\n"
    with pytest.raises(BackendFailure) as caught:
        await run_here(parity_service, language="python", code=code, backend="matrixlab")
    assert caught.value.status == 502 and caught.value.code == "backend_error"
    assert "(exit 999): Runner error: 'utf-8' codec can't decode" in caught.value.message


async def test_limits_the_runner_cannot_honour_are_in_the_plan_and_the_result(
    parity_service: SandboxService,
) -> None:
    parity_service.settings.update({"memory_limit_mb": 64, "max_processes": 8})
    plan, result = await run_here(
        parity_service, language="python", code="print(1)", backend="matrixlab"
    )
    expected = [
        "memory limit 128 MB, not 64 MB: the Runner's minimum",
        "process limit 16, not 8: the Runner's minimum",
        "no file-size limit (128 MB asked): the Runner has none (its /tmp is a 256 MB tmpfs)",
    ]
    # The stand-in is not the lifecycle's: the Runner keeps its copies of the run.
    expected.append(KEPT_NOTE)
    assert result.notes == expected and result.stdout == "1\n"
    assert [c["label"] for c in plan.checks if not c["ok"]][-5:-1] == expected
    assert plan.checks[-1] == {"label": FILES_OUT_GAP, "ok": False}  # out/ is not handed back
    assert {"label": NOT_ON_MATRIXLAB, "ok": False} in plan.checks  # no shim is sent there
    local_plan, local = await run_here(
        parity_service, language="python", code="print(1)", backend="subprocess"
    )
    assert local.notes == [] and not any("Runner" in c["label"] for c in local_plan.checks)


async def test_a_variable_passed_by_name_reaches_the_snippet_on_both(
    parity_service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PARITY_VALUE", 'it\'s "quoted"\nand two lines')
    # The administrator lists the name (a caller may pass only a listed one).
    policy = parity_service.policy
    parity_service.policy = dataclasses.replace(policy, caller_vars=frozenset({"PARITY_VALUE"}))
    code = "import os\nprint(repr(os.environ.get('PARITY_VALUE')))"
    answers = {}
    for backend in ("subprocess", "matrixlab"):
        plan, result = await run_here(
            parity_service,
            language="python",
            code=code,
            env=["PARITY_VALUE"],
            backend=backend,
        )
        assert "passes the server's PARITY_VALUE" in [c["label"] for c in plan.checks]
        answers[backend] = result.stdout
    assert answers["matrixlab"] == answers["subprocess"] == "'it\\'s \"quoted\"\\nand two lines'\n"


async def test_a_killed_snippets_unflushed_print_is_kept_by_the_runners_image(
    parity_service: SandboxService,
) -> None:
    """Documented difference: the Runner's python image sets PYTHONUNBUFFERED=1."""
    code = "import time\nprint('before the kill')\ntime.sleep(30)"
    _, remote = await run_here(
        parity_service, language="python", code=code, timeout_sec=2, backend="matrixlab"
    )
    assert remote.timed_out and remote.stdout == "before the kill\n"


async def test_a_stop_where_no_container_can_be_removed_says_the_run_goes_on(
    parity_service: SandboxService,
) -> None:
    """Documented difference: locally Stop kills the process tree; the Runner has no cancel,
    and the stand-in's runs are local processes, so there is no container to remove."""
    run_id = "run_" + "7" * 16

    async def stop_it() -> None:
        while run_id not in parity_service.executor.active_runs():
            await asyncio.sleep(0.01)
        await asyncio.sleep(1.0)
        parity_service.cancel(run_id)

    stopper = asyncio.ensure_future(stop_it())
    plan, result = await run_here(
        parity_service,
        language="python",
        code="import time; time.sleep(30)",
        timeout_sec=30,
        backend="matrixlab",
        run_id=run_id,
    )
    await stopper
    assert result.cancelled and result.exit_code == -1
    assert result.command == plan.command == ["python", "/workspace/main.py"]
    assert result.notes[:-1] == [c["label"] for c in plan.checks if not c["ok"]][-3:-1]
    assert result.notes[-1] == (
        "Stop could not stop the run on the Runner (no container of this run is on the "
        "Docker engine this server reaches): it goes on there until it ends or reaches its "
        "timeout of 33 s"
    )
