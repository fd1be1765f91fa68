"""REST: matrixlab Test connection and lifecycle routes on a real server (OpenAPI-checked)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from tests.docker.conftest import (  # noqa: F401 - fixtures
    RUNNER_IMAGE,
    docker_engine,
    test_images,
)
from tests.support.live_server import free_port
from tests.support.standin_fixture import StandinRunner

from .helpers import Api, approved_run

TEST = "api/sandbox/matrixlab/test"
LIFECYCLE = "api/sandbox/matrixlab/lifecycle"


async def test_connection_with_unsaved_values(
    api: Api,
    runner_standin: StandinRunner,
) -> None:
    body = {"matrixlab_url": runner_standin.url, "matrixlab_token": runner_standin.token}
    answer = await api("POST", TEST, body)
    assert answer.code == 200, answer.text
    assert answer.body["ok"] is True and answer.body["version"] == "0.1.0"
    assert answer.body["code_run"] is True and answer.body["workspace_run"] is True
    assert runner_standin.token not in answer.text
    config = await api("GET", "api/sandbox/config")
    assert config.body["has_token"] is False and config.body["matrixlab_url"] != runner_standin.url

    wrong = await api("POST", TEST, {"matrixlab_url": runner_standin.url, "matrixlab_token": "x"})
    assert wrong.code == 200 and wrong.body["ok"] is False
    assert "MATRIXLAB_BEARER_TOKEN" in wrong.body["hint"]


async def test_connection_with_a_bad_url_is_400(api: Api) -> None:
    answer = await api("POST", TEST, {"matrixlab_url": "ftp://runner"})
    assert answer.code == 400 and answer.body["code"] == "invalid_setting"


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Point the Docker SDK at a socket where no engine answers."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")


async def test_lifecycle_status_is_safe_without_docker(api: Api, no_docker: None) -> None:
    answer = await api("GET", LIFECYCLE)
    assert answer.code == 200, answer.text
    body = answer.body
    assert body["docker_available"] is False and body["lifecycle_enabled"] is False
    assert body["running"] is False and body["installed"] is False
    assert any(line.startswith("docker pull ") for line in body["instructions"])


@pytest.mark.parametrize("action", ["install", "start", "stop"])
async def test_actions_without_the_flag_are_403_naming_it(api: Api, action: str) -> None:
    answer = await api("POST", f"api/sandbox/matrixlab/{action}")
    assert (answer.code, answer.body["code"]) == (403, "lifecycle_disabled")
    assert "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE" in answer.body["message"]


async def test_actions_without_docker_are_503(
    api: Api, no_docker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    answer = await api("POST", "api/sandbox/matrixlab/start")
    assert (answer.code, answer.body["code"]) == (503, "docker_unavailable")


@pytest.mark.docker
async def test_start_run_stop_over_rest_on_real_docker(
    api: Api,
    docker_engine: Any,  # noqa: F811
    test_images: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    name = "gitpilot-test-" + secrets.token_hex(4)
    monkeypatch.setenv("GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE", "1")
    monkeypatch.setenv("GITPILOT_MATRIXLAB_RUNNER_IMAGE", RUNNER_IMAGE)
    monkeypatch.setenv("GITPILOT_MATRIXLAB_CONTAINER", name)
    monkeypatch.setenv("GITPILOT_MATRIXLAB_JOBS_DIR", str(tmp_path / "jobs"))
    url = f"http://127.0.0.1:{free_port()}"
    saved = await api("PUT", "api/sandbox/config", {"matrixlab_url": url})
    assert saved.code == 200, saved.text
    try:
        started = await api("POST", "api/sandbox/matrixlab/start")
        assert started.code == 200 and started.body["ok"] is True, started.text
        # No token was set: start made and saved one before creating the container.
        made, created = started.body["steps"][:2]
        assert made["cmd"] == "jupyter sandbox config --set matrixlab_token=***"
        assert created["cmd"].startswith(f"docker run -d --name {name}")
        assert "MATRIXLAB_BEARER_TOKEN=***" in created["cmd"]
        result = await approved_run(
            api, "python", "print('via the container')", backend="matrixlab"
        )
        assert result.code == 200, result.text
        assert result.body["stdout"] == "via the container\n" and result.body["sandbox_id"]
        stopped = await api("POST", "api/sandbox/matrixlab/stop")
        assert stopped.code == 200 and stopped.body["ok"] is True
        status = await api("GET", LIFECYCLE)
        assert status.body["running"] is False and status.body["installed"] is True
    finally:
        for container in docker_engine.containers.list(all=True, filters={"name": name}):
            container.remove(force=True)


class HeaderRecorder:
    """A fake Runner on loopback that answers ``/health`` and keeps every request's headers."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        seen: list[dict[str, str]] = []
        self.seen = seen

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                seen.append({"path": self.path, **dict(self.headers.items())})
                body = b'{"ok": true, "version": "0.1.0"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def authorizations(self) -> list[str | None]:
        return [headers.get("Authorization") for headers in self.seen]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorders() -> Any:
    made = [HeaderRecorder(), HeaderRecorder()]
    yield made
    for recorder in made:
        recorder.close()


async def test_a_saved_token_never_follows_a_new_url(
    api: Api, recorders: list[HeaderRecorder], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Save URL A + token, save only URL B, Test connection: B gets no bearer token."""
    monkeypatch.delenv("GITPILOT_MATRIXLAB_TOKEN", raising=False)
    monkeypatch.delenv("GITPILOT_MATRIXLAB_URL", raising=False)
    first, second = recorders
    token = "saved-" + secrets.token_hex(8)
    saved = await api(
        "PUT", "api/sandbox/config", {"matrixlab_url": first.url, "matrixlab_token": token}
    )
    assert saved.code == 200 and saved.body["has_token"] is True
    assert (await api("POST", TEST, {})).code == 200
    assert f"Bearer {token}" in first.authorizations()

    # Test connection of an unsaved URL: the saved token stays home.
    assert (await api("POST", TEST, {"matrixlab_url": second.url})).code == 200
    assert second.seen and not any(second.authorizations()), second.seen

    # Saving only a new URL drops the token: nothing is ever sent to B with it.
    moved = await api("PUT", "api/sandbox/config", {"matrixlab_url": second.url + "/"})
    assert moved.code == 200 and moved.body["has_token"] is False
    assert (await api("POST", TEST, {})).code == 200
    assert len(second.seen) > 2 and not any(second.authorizations()), second.seen
    assert token not in (await api("GET", "api/sandbox/config")).text

    # Saving the same URL again (or a URL and a token together) keeps / sets the token.
    await api("PUT", "api/sandbox/config", {"matrixlab_url": first.url, "matrixlab_token": token})
    same = await api("PUT", "api/sandbox/config", {"matrixlab_url": first.url + "/"})
    assert same.body["has_token"] is True


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("matrixlab_url", "http://a\nb"),
        ("matrixlab_url", "http://runner:8765/\x1b[2K"),
        ("matrixlab_url", "http://run ner:8765"),
        ("matrixlab_url", "http://runner\u202e:8765"),
        ("matrixlab_token", "abc\r\nX-Injected: 1"),
        ("matrixlab_image", "python:3 --privileged"),
    ],
)
async def test_settings_refuse_control_characters_and_spaces(
    api: Api, key: str, value: str
) -> None:
    before = (await api("GET", "api/sandbox/config")).body
    answer = await api("PUT", "api/sandbox/config", {key: value})
    assert (answer.code, answer.body["code"]) == (400, "invalid_setting"), answer.text
    assert (await api("GET", "api/sandbox/config")).body == before
    if key == "matrixlab_url":
        tested = await api("POST", TEST, {"matrixlab_url": value})
        assert (tested.code, tested.body["code"]) == (400, "invalid_setting")
