"""MatrixLabSandbox against a real stand-in Runner process, in each of its modes."""

from __future__ import annotations

import asyncio
import base64
import io
import re
import shutil
import time
import zipfile
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.errors import BackendFailure, BackendUnreachable, RunOutcomeUnknown
from gitpilot_jupyter.sandbox.matrixlab.backend import MatrixLabSandbox
from gitpilot_jupyter.sandbox.matrixlab.protocol import image_language, runner_error
from gitpilot_jupyter.sandbox.matrixlab.wrapper import START_ALLOWANCE_SEC
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService, runs
from tests.matrixlab.conftest import backend_for, sent_requests
from tests.support.live_server import free_port
from tests.support.runs import run_here
from tests.support.standin_fixture import StandinRunner, StartStandin


def snippet(code: str, language: str = "python", **kwargs: object) -> RunRequest:
    return RunRequest(language=language, code=code, timeout_sec=10, **kwargs)  # type: ignore[arg-type]


async def test_a_snippet_runs_and_the_banner_is_stripped(runner_standin: StandinRunner) -> None:
    result = await backend_for(runner_standin).run(
        snippet("import sys; print('hi'); sys.stderr.write('err\\n'); sys.exit(3)")
    )
    assert (result.exit_code, result.stdout, result.stderr) == (3, "hi\n", "err\n")
    assert result.backend == "matrixlab" and not result.timed_out and not result.truncated
    assert result.sandbox_id and result.sandbox_id.startswith("sbx_")


async def test_output_reaches_the_callback(runner_standin: StandinRunner) -> None:
    seen: list[tuple[str, str]] = []

    async def on_output(stream: str, text: str) -> None:
        seen.append((stream, text))

    await backend_for(runner_standin).run(snippet("echo out; echo err >&2", "bash"), on_output)
    assert seen == [("stdout", "out\n"), ("stderr", "err\n")]


async def test_a_line_that_is_not_the_banner_is_kept(start_standin: StartStandin) -> None:
    runner = start_standin(mode="no-banner")
    result = await backend_for(runner).run(
        snippet("print('== Matrix Lab step: mine ==')\nprint(1)")
    )
    assert result.stdout == "== Matrix Lab step: mine ==\n1\n"


async def test_a_timeout_keeps_the_output_even_after_stderr(
    runner_standin: StandinRunner,
) -> None:
    request = snippet(
        "import sys, time; print('before', flush=True); sys.stderr.write('x'); "
        "sys.stderr.flush(); time.sleep(30)"
    )
    request.timeout_sec = 2
    result = await backend_for(runner_standin).run(request)
    assert (result.timed_out, result.exit_code) == (True, -1)
    assert (result.stdout, result.stderr) == ("before\n", "x")
    assert 2000 <= result.duration_ms < 3000


@pytest.mark.parametrize("stderr", [False, True])
async def test_a_container_start_longer_than_the_allowance_still_times_out(
    start_standin: StartStandin, stderr: bool
) -> None:
    """The Runner's own budget ends the run: exit 124 + TIMEOUT, or its 500 after stderr."""
    runner = start_standin(mode="slow-start", delay=START_ALLOWANCE_SEC + 0.5)
    write = "sys.stderr.write('x'); sys.stderr.flush(); " if stderr else ""
    request = snippet(f"import sys, time; print('before', flush=True); {write}time.sleep(30)")
    request.timeout_sec = 1
    result = await backend_for(runner).run(request)
    assert (result.timed_out, result.exit_code, result.stderr) == (True, -1, "")
    if stderr:
        # Runner 0.1.0 drops the output of such a run: the result says so.
        assert result.stdout == "" and "lost the output" in result.notes[-1]
    else:
        assert result.stdout == "before\n"


async def test_a_500_before_the_budget_is_spent_is_a_backend_error(
    start_standin: StartStandin,
) -> None:
    runner = start_standin(mode="error500-timeout")
    with pytest.raises(BackendFailure, match="context deadline exceeded"):
        await backend_for(runner).run(snippet("print(1)"))


async def test_our_cap_applies_after_the_runners(runner_standin: StandinRunner) -> None:
    request = snippet("print('é' * 300_000)")
    request.max_output_bytes = 1000
    result = await backend_for(runner_standin).run(request)
    assert result.truncated and result.stdout == "é" * 500 and result.exit_code == 0


def workspace_files(body: object) -> dict[str, str]:
    """The files of the zip workspace a /run body carried."""
    assert isinstance(body, dict)
    data = base64.b64decode(body["workspace"]["zip_base64"])
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name).decode() for name in archive.namelist()}


async def test_a_snippet_goes_to_code_run_as_a_script_that_writes_and_times_it(
    runner_standin: StandinRunner,
) -> None:
    code = "import os\nprint(input().upper(), sorted(os.listdir('.')))"
    env = {"PATH": "/host/bin", "LANG": "C.UTF-8", "PASSED_BY_NAME": "v"}
    request = snippet(code, stdin="abc\n", env=env)
    result = await backend_for(runner_standin).run(request)
    # The Runner's script.sh and stdin.txt are gone before the snippet starts.
    assert result.stdout == "ABC ['main.py']\n" and result.stderr == ""
    sent = sent_requests(runner_standin)[-1]
    body = sent["body"]
    assert sent["path"] == "/code/run" and isinstance(body, dict)
    # Only what was passed by name goes, with the run's tag; never this host's PATH or locale.
    tag = body["env"].pop("GITPILOT_RUN_TAG")
    assert body["env"] == {"PASSED_BY_NAME": "v"} and re.fullmatch("[0-9a-f]{24}", tag)
    assert body["language"] == "bash" and body["image"] == "python"
    assert body["stdin"] == "abc\n" and code in body["code"]
    # The Runner gets the container's start on top of the snippet's own 10 s.
    assert body["timeout"] == 10 + START_ALLOWANCE_SEC and body["allow_network"] is False
    assert 'timeout -s KILL 10 python "$PWD"/main.py' in body["code"]
    # The snippet's own limits, plus room for our 4 processes (init, 2 bash, timeout).
    assert (body["mem_limit_mb"], body["pids_limit"]) == (1024, 256 + 4)


async def test_limits_below_the_runners_minimums_are_raised_and_said(
    runner_standin: StandinRunner,
) -> None:
    request = snippet("print(1)")
    request.limits = ResourceLimits(memory_mb=64, max_processes=8, max_file_size_mb=5)
    result = await backend_for(runner_standin).run(request)
    body = sent_requests(runner_standin)[-1]["body"]
    assert isinstance(body, dict) and (body["mem_limit_mb"], body["pids_limit"]) == (128, 20)
    # The fourth note: this Runner is not the lifecycle's, so it keeps its copies.
    assert result.stdout == "1\n" and len(result.notes) == 4
    assert "no file-size limit (5 MB asked)" in result.notes[2]


@pytest.mark.parametrize("big", ["stdin", "code"])
async def test_input_beyond_code_runs_limit_goes_to_run_in_the_workspace(
    runner_standin: StandinRunner, big: str
) -> None:
    """``/code/run`` takes 1,000,000 characters; ``/run`` carries more in its zip."""
    huge = "x" * 1_000_001
    if big == "stdin":
        request = snippet("import sys\nprint(len(sys.stdin.read()))", stdin=huge)
    else:
        request = snippet(f"s = '{huge}'\nprint(len(s))")
    result = await backend_for(runner_standin).run(request)
    assert (result.exit_code, result.stdout) == (0, "1000001\n")
    sent = sent_requests(runner_standin)[-1]
    assert sent["path"] == "/run"
    files = workspace_files(sent["body"])
    assert files["main.py"] == request.code
    assert files.get(".gitpilot-stdin") == (huge if big == "stdin" else None)


async def test_the_users_image_goes_only_with_its_language(runner_standin: StandinRunner) -> None:
    backend = backend_for(runner_standin, image="python:3.12-alpine")
    await backend.run(snippet("print(1)"))
    await backend.run(snippet("echo 1", "bash"))
    python_body, bash_body = (r["body"] for r in sent_requests(runner_standin)[-2:])
    assert isinstance(python_body, dict) and isinstance(bash_body, dict)
    # The tag says alpine, the repository says python: a python image.
    assert python_body["image"] == "python:3.12-alpine"
    assert bash_body["image"] == "utils"


@pytest.mark.parametrize(
    ("image", "language"),
    [
        ("python:3.12-alpine", "python"),
        ("ruslanmv/matrix-lab-sandbox-node:latest", "javascript"),
        ("registry.example:5000/team/node:20@sha256:abc", "javascript"),
        ("alpine:3.19", "bash"),
        ("busybox", "bash"),
        ("my/image:python3", "python"),
    ],
)
def test_an_images_language_comes_from_its_repository_not_its_tag(
    image: str, language: str
) -> None:
    assert image_language(image) == language


async def test_an_image_the_runner_cannot_pull_is_a_backend_error(
    runner_standin: StandinRunner,
) -> None:
    backend = backend_for(runner_standin, image="bash:5.2")
    with pytest.raises(BackendFailure) as caught:
        await backend.run(snippet("echo 1", "bash"))
    assert caught.value.status == 502 and "(exit 125)" in caught.value.message
    assert "Unable to find image 'bash:5.2' locally" in caught.value.message
    assert "not the snippet's" in caught.value.message


async def test_a_snippet_exiting_125_or_999_is_the_snippets_exit(
    runner_standin: StandinRunner,
) -> None:
    for code in (125, 999 % 256):
        result = await backend_for(runner_standin).run(
            snippet(f"echo 'Runner error: mine' >&2; exit {code}", "bash")
        )
        assert (result.exit_code, result.stderr) == (code, "Runner error: mine\n")


async def test_a_422_never_quotes_what_was_sent(runner_standin: StandinRunner) -> None:
    secret_stdin = "my-private-input " * 70_000
    response = httpx.post(
        runner_standin.url + "/code/run",
        json={"language": "python", "code": "print(1)", "stdin": secret_stdin},
        headers={"Authorization": f"Bearer {runner_standin.token}"},
        timeout=30,
    )
    assert response.status_code == 422 and "my-private-input" in response.text
    error = runner_error(runner_standin.url, "/code/run", response)
    assert error.status == 502 and "my-private-input" not in error.message
    assert "stdin: String should have at most 1000000 characters (string_too_long)" in (
        error.message
    )


async def test_a_wrong_token_is_a_backend_error_with_the_runners_body(
    runner_standin: StandinRunner,
) -> None:
    for token in ("", "wrong"):
        with pytest.raises(BackendFailure) as caught:
            await backend_for(runner_standin, token=token).run(snippet("print(1)"))
        assert caught.value.status == 502 and caught.value.code == "backend_error"
        assert "401" in caught.value.message
        assert "missing or invalid bearer token" in caught.value.message
        assert "matrixlab_token" in caught.value.message


async def test_nothing_listening_is_unreachable() -> None:
    backend = MatrixLabSandbox(url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(BackendUnreachable) as caught:
        await backend.run(snippet("print(1)"))
    assert caught.value.status == 503 and caught.value.code == "backend_unreachable"
    health = await backend.health()
    assert health["ok"] is False and "cannot reach" in health["error"]


async def test_a_runner_silent_past_its_budget_plus_grace_has_an_unknown_outcome(
    start_standin: StartStandin,
) -> None:
    # The Runner took the run: it may be running it still, so it is never "not run".
    runner = start_standin(mode="slow", delay=10)
    request = snippet("print(1)")
    request.timeout_sec = 1
    with pytest.raises(RunOutcomeUnknown, match="did not answer within 9 s") as caught:
        await backend_for(runner).run(request)
    assert (caught.value.status, caught.value.code) == (504, "run_outcome_unknown")
    assert "may still be running" in caught.value.message


@pytest.mark.parametrize(
    ("mode", "quoted"),
    [
        ("error500", "runner exploded"),
        ("error500-timeout", "context deadline exceeded"),
        ("garbage", "an HTML page: not json {"),  # never its markup
        ("down-docker", "Docker"),
    ],
)
async def test_runner_errors_are_backend_errors_quoting_the_body(
    start_standin: StartStandin, mode: str, quoted: str
) -> None:
    runner = start_standin(mode=mode)
    with pytest.raises(BackendFailure) as caught:
        await backend_for(runner).run(snippet("print(1)"))
    assert caught.value.status == 502 and quoted in caught.value.message


async def test_error_bodies_are_quoted_up_to_400_characters(start_standin: StartStandin) -> None:
    runner = start_standin(mode="error500")
    with pytest.raises(BackendFailure) as caught:
        await backend_for(runner).run(snippet("print(1)"))
    detail = httpx.post(runner.url + "/run", json={}, timeout=10).json()["detail"]
    assert len(detail) > 1000 and detail[:400] in caught.value.message
    assert "END-OF-BODY" not in caught.value.message


async def test_health_reports_the_remote_document(start_standin: StartStandin) -> None:
    healthy = await backend_for(start_standin()).health()
    assert healthy["ok"] is True and healthy["error"] is None
    assert healthy["remote"]["service"] == "matrixlab-runner"
    down = await backend_for(start_standin(mode="down-docker")).health()
    assert down["ok"] is False and down["remote"]["ok"] is False
    assert "reachable, but its Docker daemon is unavailable" in down["error"]


async def test_a_file_runs_folder_leaves_out_what_never_belongs_in_a_workspace(
    matrixlab_service: SandboxService, tmp_path: Path
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helper.py").write_text("WORD = 'from helper'\n")
    (tmp_path / "list.sh").write_text("find . | sort\n")
    for skipped in (".git", "node_modules", "__pycache__", ".venv", "build"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "junk.txt").write_text("junk")
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (tmp_path / "link.py").symlink_to(tmp_path / "pkg" / "helper.py")
    plan = await matrixlab_service.plan(RunOptions(file="list.sh", backend="matrixlab"))
    approval = await matrixlab_service.approve(plan.plan_id)
    result = await matrixlab_service.run(
        approval["approval_token"],
        expected=RunOptions(
            language=plan.spec.language,
            code=plan.spec.code,
            timeout_sec=plan.spec.timeout_sec,
            backend="matrixlab",
        ),
    )
    assert result.stdout.split() == [".", "./list.sh", "./pkg", "./pkg/helper.py"]
    assert result.command == ["bash", "/workspace/list.sh"]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_javascript_runs_without_the_python_image(runner_standin: StandinRunner) -> None:
    backend = backend_for(runner_standin, image="ruslanmv/matrix-lab-sandbox-python:latest")
    result = await backend.run(snippet("console.log(6 * 7)", "javascript"))
    assert result.stdout == "42\n"
    body = sent_requests(runner_standin)[-1]["body"]
    assert isinstance(body, dict) and body["image"] == "node"


async def test_status_checks_the_token_not_only_health(
    service: SandboxService, runner_standin: StandinRunner
) -> None:
    """``/health`` needs no token: status must not say ok for a Runner that refuses ours."""
    service.settings.update({"backend": "matrixlab", "matrixlab_url": runner_standin.url})
    for token, state in (("wrong", "rejected"), ("", "requires")):
        service.settings.update({"matrixlab_token": token})
        status = await service.status()
        assert status["ok"] is False and "401" in status["error"], status
        assert state in status["error"] and "MATRIXLAB_BEARER_TOKEN" in status["error"]
    service.settings.update({"matrixlab_token": runner_standin.token})
    status = await service.status()
    assert status["ok"] is True and status["error"] is None


async def test_a_file_run_sends_its_folder_and_runs_the_approved_text(
    matrixlab_service: SandboxService, runner_standin: StandinRunner, tmp_path: Path
) -> None:
    (tmp_path / "project" / "pkg").mkdir(parents=True)
    (tmp_path / "project" / "pkg" / "helper.py").write_text("WORD = 'from helper'\n")
    script = tmp_path / "project" / "job.py"
    script.write_text("from pkg.helper import WORD\nprint(WORD, input())\n")
    plan = await matrixlab_service.plan(
        RunOptions(file="project/job.py", stdin="ok", backend="matrixlab")
    )
    assert plan.command == ["python", "/workspace/job.py"]
    approval = await matrixlab_service.approve(plan.plan_id)
    script.write_text("print('changed after the approval')\n")
    result = await matrixlab_service.run(
        approval["approval_token"],
        expected=RunOptions(
            language=plan.spec.language,
            code=plan.spec.code,
            stdin="ok",
            timeout_sec=plan.spec.timeout_sec,
            backend="matrixlab",
        ),
    )
    assert (result.exit_code, result.stdout) == (0, "from helper ok\n"), result.stderr
    assert result.command == plan.command
    sent = sent_requests(runner_standin)[-1]
    assert sent["path"] == "/run"
    files = workspace_files(sent["body"])
    assert files["job.py"] == plan.spec.code and files["pkg/helper.py"] == "WORD = 'from helper'\n"


async def test_output_past_the_runners_cap_keeps_the_exit_and_the_timeout(
    runner_standin: StandinRunner,
) -> None:
    """Beyond 10 MiB the Runner cuts the stream, our report with it: exit and clock decide."""
    flood = "import sys\nsys.stderr.write('e' * (11 * 1024 * 1024))\nsys.stderr.flush()\n"
    result = await backend_for(runner_standin).run(snippet(flood + "sys.exit(4)"))
    assert (result.exit_code, result.timed_out, result.truncated) == (4, False, True)
    request = snippet(flood + "import time\ntime.sleep(30)")
    request.timeout_sec = 2
    result = await backend_for(runner_standin).run(request)
    assert (result.exit_code, result.timed_out, result.truncated) == (-1, True, True)


def _sleep_30(service: SandboxService, run_id: str) -> Coroutine[Any, Any, Any]:
    return run_here(
        service,
        language="python",
        code="import time; time.sleep(30)",
        backend="matrixlab",
        run_id=run_id,
    )


async def _under_way(service: SandboxService, run_id: str) -> None:
    while run_id not in service.executor.active_runs():
        await asyncio.sleep(0.01)


async def test_a_stop_the_backend_does_not_honour_ends_the_run_after_the_grace(
    matrixlab_service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A backend slower to stop than the grace: the executor cancels it.
    monkeypatch.setattr(runs, "STOP_GRACE_SEC", 0.5)
    run_id = "run_" + "5" * 16
    asked: list[float] = []

    async def stop_it() -> None:
        await _under_way(matrixlab_service, run_id)
        await asyncio.sleep(0.3)  # under way on the Runner
        asked.append(time.monotonic())
        matrixlab_service.cancel(run_id)

    stopper = asyncio.ensure_future(stop_it())
    _, result = await _sleep_30(matrixlab_service, run_id)  # in this very task
    waited = time.monotonic() - asked[0]
    await stopper
    assert result.cancelled and result.exit_code == -1 and not result.ok
    assert (result.run_id, result.backend) == (run_id, "matrixlab")
    # Even so, the envelope has the backend's own command and notes.
    assert result.command == ["python", "/workspace/main.py"]
    assert result.notes and result.notes[0].startswith("no file-size limit")
    assert 0.4 < waited < 5, waited  # the grace, not the snippet's 30 s
    assert matrixlab_service.executor.active_runs() == []
    # The task that ran it is not left cancelled.
    cancelling = getattr(asyncio.current_task(), "cancelling", None)
    assert cancelling is None or cancelling() == 0
    await asyncio.wait_for(asyncio.sleep(0.01), 5)


async def test_a_caller_cancelled_during_a_run_stays_cancelled_and_the_run_ends(
    matrixlab_service: SandboxService,
) -> None:
    run_id = "run_" + "6" * 16
    running = asyncio.ensure_future(_sleep_30(matrixlab_service, run_id))
    await _under_way(matrixlab_service, run_id)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(running, 10)
    assert matrixlab_service.executor.active_runs() == []
