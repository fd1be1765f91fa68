"""MatrixLabSandbox against a real stand-in Runner process, in each of its modes."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.errors import BackendFailure, BackendUnreachable, InvalidRequest
from gitpilot_jupyter.sandbox.matrixlab.backend import MatrixLabSandbox
from tests.matrixlab.conftest import backend_for, sent_requests
from tests.support.live_server import free_port
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


async def test_timeout_124_becomes_timed_out(runner_standin: StandinRunner) -> None:
    request = snippet("import time; print('before', flush=True); time.sleep(30)")
    request.timeout_sec = 2
    result = await backend_for(runner_standin).run(request)
    assert (result.timed_out, result.exit_code) == (True, -1)
    assert (result.stdout, result.stderr) == ("before\n", "")


async def test_the_runners_500_on_timeout_is_a_timed_out_result(
    runner_standin: StandinRunner,
) -> None:
    request = snippet("import sys, time; sys.stderr.write('x'); sys.stderr.flush(); time.sleep(30)")
    request.timeout_sec = 2
    result = await backend_for(runner_standin).run(request)
    assert (result.timed_out, result.exit_code) == (True, -1)


async def test_our_cap_applies_after_the_runners(runner_standin: StandinRunner) -> None:
    request = snippet("print('é' * 300_000)")
    request.max_output_bytes = 1000
    result = await backend_for(runner_standin).run(request)
    assert result.truncated and result.stdout == "é" * 500 and result.exit_code == 0


async def test_stdin_is_sent_and_env_is_not(runner_standin: StandinRunner) -> None:
    request = snippet("print(input().upper())", stdin="abc\n", env={"HOST_SECRET_PATH": "/x"})
    result = await backend_for(runner_standin).run(request)
    assert result.stdout == "ABC\n"
    body = sent_requests(runner_standin)[-1]["body"]
    assert isinstance(body, dict) and "env" not in body and body["stdin"] == "abc\n"
    assert body["timeout"] == 10 and body["allow_network"] is False


async def test_the_users_image_goes_only_with_its_language(runner_standin: StandinRunner) -> None:
    backend = backend_for(runner_standin, image="ruslanmv/matrix-lab-sandbox-python:latest")
    await backend.run(snippet("print(1)"))
    await backend.run(snippet("echo 1", "bash"))
    python_body, bash_body = (r["body"] for r in sent_requests(runner_standin)[-2:])
    assert isinstance(python_body, dict) and isinstance(bash_body, dict)
    assert python_body["image"] == "ruslanmv/matrix-lab-sandbox-python:latest"
    assert "image" not in bash_body and bash_body["language"] == "bash"


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


async def test_a_runner_slower_than_the_timeout_plus_grace_is_unreachable(
    start_standin: StartStandin,
) -> None:
    runner = start_standin(mode="slow", delay=8)
    request = snippet("print(1)")
    request.timeout_sec = 1
    with pytest.raises(BackendUnreachable, match="did not answer within 6 s"):
        await backend_for(runner).run(request)


@pytest.mark.parametrize(
    ("mode", "quoted"),
    [
        ("error500", "runner exploded"),
        ("error500-timeout", "context deadline exceeded"),
        ("garbage", "<html>not json {"),
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
    body = httpx.post(runner.url + "/code/run", json={}, timeout=10).text
    assert len(body) > 1000 and body[:400] in caught.value.message
    assert "END-OF-BODY" not in caught.value.message


async def test_health_reports_the_remote_document(start_standin: StartStandin) -> None:
    healthy = await backend_for(start_standin()).health()
    assert healthy["ok"] is True and healthy["error"] is None
    assert healthy["remote"]["service"] == "matrixlab-runner"
    down = await backend_for(start_standin(mode="down-docker")).health()
    assert down["ok"] is False and down["remote"]["ok"] is False
    assert "reachable, but its Docker daemon is unavailable" in down["error"]


async def test_a_file_with_its_folder_runs_through_run_with_a_zip_workspace(
    runner_standin: StandinRunner, tmp_path: Path
) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "helper.py").write_text("WORD = 'from helper'\n")
    (tmp_path / "main.py").write_text("from pkg.helper import WORD\nprint(WORD)\n")
    for skipped in (".git", "node_modules", "__pycache__", ".venv"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "junk.txt").write_text("junk")
    (tmp_path / "link.py").symlink_to(tmp_path / "main.py")
    backend = backend_for(runner_standin)
    result = await backend.run_workspace(
        ["python3", "main.py"], tmp_path, language="python", timeout_sec=10
    )
    assert (result.exit_code, result.stdout) == (0, "from helper\n")
    listing = await backend.run_workspace(
        ["bash", "-c", "find . | sort"], tmp_path, language="bash", timeout_sec=10
    )
    assert listing.stdout.split() == [".", "./main.py", "./pkg", "./pkg/helper.py"]
    paths = [r["path"] for r in sent_requests(runner_standin)]
    assert paths[-2:] == ["/run", "/run"] and "/repo/run" not in paths
    body = sent_requests(runner_standin)[-1]["body"]
    assert isinstance(body, dict) and body["image"] == "bash" and body["cwd"] == "."
    in_pkg = await backend.run_workspace(
        ["ls"], tmp_path, language="bash", timeout_sec=10, cwd="pkg"
    )
    assert in_pkg.stdout == "helper.py\n"
    for cwd in ("../x", "/etc"):
        with pytest.raises(InvalidRequest):
            await backend.run_workspace(["ls"], tmp_path, language="bash", timeout_sec=10, cwd=cwd)


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_javascript_runs_without_the_python_image(runner_standin: StandinRunner) -> None:
    backend = backend_for(runner_standin, image="ruslanmv/matrix-lab-sandbox-python:latest")
    result = await backend.run(snippet("console.log(6 * 7)", "javascript"))
    assert result.stdout == "42\n"
    body = sent_requests(runner_standin)[-1]["body"]
    assert isinstance(body, dict) and "image" not in body
