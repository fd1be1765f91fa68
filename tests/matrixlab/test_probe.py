"""Test connection (core, service and CLI) against real stand-in Runners in each failure mode."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from gitpilot_jupyter.sandbox.errors import InvalidSetting
from gitpilot_jupyter.sandbox.matrixlab.probe import SNIPPET_OUTPUT, probe_runner
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.matrixlab.conftest import sent_requests
from tests.support.live_server import free_port
from tests.support.standin_fixture import StandinRunner, StartStandin
from tests.unit.test_cli import cli


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def test_a_healthy_runner_reports_everything(runner_standin: StandinRunner) -> None:
    report = await probe_runner(runner_standin.url, runner_standin.token)
    assert report["ok"] is True and report["error"] is None and report["hints"] == []
    assert report["reachable"] is True and isinstance(report["latency_ms"], int)
    assert (report["version"], report["protocol"]) == ("0.1.0", "matrixlab.runner.v1")
    assert report["docker_ok"] is True and report["token"] == "accepted"
    assert report["code_run"] is True and report["workspace_run"] is True
    assert runner_standin.token not in str(report)


@pytest.mark.parametrize(("token", "state"), [("", "required"), ("wrong", "rejected")])
async def test_a_bad_token_says_401_and_how_to_fix_it(
    runner_standin: StandinRunner, token: str, state: str
) -> None:
    report = await probe_runner(runner_standin.url, token)
    assert report["ok"] is False and report["token"] == state
    assert "401" in report["error"] and "MATRIXLAB_BEARER_TOKEN" in report["hint"]


async def test_a_runner_without_a_token_needs_none(start_standin: StartStandin) -> None:
    report = await probe_runner(start_standin().url, "")
    assert report["ok"] is True and report["token"] == "not required"


async def test_docker_down_behind_the_runner(start_standin: StartStandin) -> None:
    report = await probe_runner(start_standin(mode="down-docker").url)
    assert report["ok"] is False and report["reachable"] is True and report["docker_ok"] is False
    assert "reachable, but its Docker daemon is unavailable" in report["error"]
    assert "docker.sock" in report["hint"]


async def test_a_runner_too_old_is_told_to_upgrade(start_standin: StartStandin) -> None:
    report = await probe_runner(start_standin(mode="old").url)
    assert report["ok"] is False and report["code_run"] is False
    assert report["workspace_run"] is False and "upgrade the Runner image" in report["hint"]


async def test_nothing_listening_says_how_to_start_it() -> None:
    report = await probe_runner(f"http://127.0.0.1:{free_port()}")
    assert report["ok"] is False and report["reachable"] is False
    assert "matrixlab start" in report["hint"]


async def test_the_wrong_port_8765_vs_8000_is_spotted(start_standin: StartStandin) -> None:
    if not (port_free(8000) and port_free(8765)):
        pytest.skip("ports 8000 and 8765 must both be free on 127.0.0.1 for this test")
    runner = start_standin(port=8000)
    report = await probe_runner("http://127.0.0.1:8765")
    assert report["ok"] is False
    assert "set matrixlab_url to http://127.0.0.1:8000" in report["hint"]
    runner.stop()


async def test_a_slow_runner_times_out_and_is_called_busy_not_stopped(
    start_standin: StartStandin,
) -> None:
    report = await probe_runner(start_standin(mode="slow", delay=7).url)
    assert report["ok"] is False and "did not answer within 5 s" in report["error"]
    assert "busy" in report["hint"] and "matrixlab start" not in report["hint"]


@pytest.fixture
def other_http_server() -> Iterator[str]:
    """A plain HTTP server that is not a Runner."""
    proc = subprocess.Popen(
        [sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://127.0.0.1:N/) ..."
    yield line.split("(", 1)[1].split(")", 1)[0].rstrip("/")
    proc.kill()
    proc.wait(timeout=10)
    proc.stdout.close()


async def test_something_else_on_the_port_is_not_taken_for_a_runner(
    other_http_server: str,
) -> None:
    report = await probe_runner(other_http_server)
    assert report["ok"] is False and report["reachable"] is True
    assert "404" in report["error"] and "something else listens" in report["hint"]
    # http.server answers an HTML page: its text is quoted, never its markup.
    assert "<" not in report["error"] and "an HTML page: Error response" in report["error"]


async def test_the_service_tests_unsaved_values_and_then_saved_ones(
    service: SandboxService, runner_standin: StandinRunner
) -> None:
    service.settings.update({"matrixlab_url": f"http://127.0.0.1:{free_port()}"})
    assert (await service.matrixlab.test_connection())["reachable"] is False
    unsaved = await service.matrixlab.test_connection(
        url=runner_standin.url, token=runner_standin.token
    )
    assert unsaved["ok"] is True
    assert service.config()["has_token"] is False  # testing saved nothing
    service.settings.update(
        {"matrixlab_url": runner_standin.url, "matrixlab_token": runner_standin.token}
    )
    assert (await service.matrixlab.test_connection())["ok"] is True
    assert (await service.matrixlab.test_connection(token="other"))["token"] == "rejected"
    with pytest.raises(InvalidSetting):
        await service.matrixlab.test_connection(url="ftp://nowhere")


async def test_the_saved_token_never_goes_to_an_unsaved_url(
    service: SandboxService, start_standin: StartStandin
) -> None:
    saved, other = start_standin(token="the-saved-token"), start_standin(token="the-saved-token")
    service.settings.update({"matrixlab_url": saved.url, "matrixlab_token": "the-saved-token"})
    assert (await service.matrixlab.test_connection())["token"] == "accepted"
    elsewhere = await service.matrixlab.test_connection(url=other.url)
    assert elsewhere["token"] == "required" and elsewhere["token_withheld"] is True
    assert "only sent to the saved URL" in elsewhere["hint"]
    typed = await service.matrixlab.test_connection(url=other.url, token="the-saved-token")
    assert typed["ok"] is True


def test_cli_test_exits_0_when_the_runner_is_fine(runner_standin: StandinRunner) -> None:
    ok = cli("matrixlab", "test", "--url", runner_standin.url, "--token", runner_standin.token)
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout and "0.1.0" in ok.stdout and runner_standin.token not in ok.stdout
    bad = cli("matrixlab", "test", "--url", runner_standin.url, "--token", "nope")
    assert bad.returncode == 1 and "MATRIXLAB_BEARER_TOKEN" in bad.stdout
    piped = cli(
        "matrixlab", "test", "--url", runner_standin.url, "--token", "-", stdin=runner_standin.token
    )
    assert piped.returncode == 0 and "accepted" in piped.stdout


# -- a real snippet before OK, and a hint for each way it fails --------------------------


def snippet_runs(runner: StandinRunner) -> int:
    """How many snippets (not token checks) the stand-in was sent."""
    return sum(1 for r in sent_requests(runner) if isinstance(r["body"], dict) and r["body"])


async def test_ok_means_a_snippet_ran_and_that_is_kept_briefly(
    runner_standin: StandinRunner,
) -> None:
    report = await probe_runner(runner_standin.url, runner_standin.token)
    assert report["ok"] is True and report["snippet"] == "ran"
    ran = sent_requests(runner_standin)[-1]["body"]
    assert isinstance(ran, dict) and SNIPPET_OUTPUT in str(ran["code"])
    before = snippet_runs(runner_standin)
    assert (await probe_runner(runner_standin.url, runner_standin.token))["ok"] is True
    assert snippet_runs(runner_standin) == before, "the snippet ran again within its 30 s"


async def test_a_configured_image_the_runner_cannot_pull_is_not_ok(
    runner_standin: StandinRunner, matrixlab_service: SandboxService
) -> None:
    image = "example.invalid/team/python-tools:1"
    report = await probe_runner(runner_standin.url, runner_standin.token, image=image)
    assert report["ok"] is False and report["token"] == "accepted"
    assert report["snippet"] == "failed" and "exit 125" in report["error"]
    assert f"the image {image} is not on the Runner's Docker" in report["hint"]
    assert f"docker pull {image}" in report["hint"]
    matrixlab_service.settings.update({"backend": "matrixlab", "matrixlab_image": image})
    status = await matrixlab_service.status()
    assert status["ok"] is False and "cannot be pulled" in str(status["error"])
    tested = await matrixlab_service.matrixlab.test_connection()
    assert tested["ok"] is False and "cannot be pulled" in tested["hint"]


async def test_an_image_with_only_python3_is_not_ok(runner_standin: StandinRunner) -> None:
    image = "example/python3-only:latest"
    report = await probe_runner(runner_standin.url, runner_standin.token, image=image)
    assert report["ok"] is False and "no `python` command" in report["error"]
    assert "no `python` command (an image with only `python3`?)" in report["hint"]


async def test_a_token_check_error_other_than_401_is_not_ok(
    start_standin: StartStandin, service: SandboxService
) -> None:
    runner = start_standin(mode="error500")
    report = await probe_runner(runner.url)
    assert report["ok"] is False and "answered 500, not 401 or 422" in report["error"]
    assert "fails its protected routes" in report["hint"]
    service.settings.update({"backend": "matrixlab", "matrixlab_url": runner.url})
    status = await service.status()
    assert status["ok"] is False and "answered 500" in str(status["error"])


async def test_https_to_a_plain_http_runner_says_use_http(runner_standin: StandinRunner) -> None:
    https = runner_standin.url.replace("http://", "https://")
    report = await probe_runner(https, runner_standin.token)
    assert report["ok"] is False and report["reachable"] is False
    assert f"set matrixlab_url to {runner_standin.url}" in report["hint"]
    assert "speaks http, not https" in report["hint"]


@pytest.fixture
def not_http_listener() -> Iterator[str]:
    """A loopback TCP server that greets like ssh, as a port taken by something else."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                # As sshd does: greet, then wait for the client (until it hangs up).
                conn.sendall(b"SSH-2.0-OpenSSH_9.2p1\r\n")
                conn.settimeout(10)
                with contextlib.suppress(OSError):
                    while conn.recv(4096):
                        pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join(timeout=5)
    server.close()


async def test_a_listener_that_is_not_http_is_named(not_http_listener: str) -> None:
    report = await probe_runner(not_http_listener)
    assert report["ok"] is False and report["reachable"] is False
    assert "does not speak HTTP" in report["hint"] and "matrixlab start" not in report["hint"]
