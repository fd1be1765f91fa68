"""Faults of the MatrixLab Runner, through the REST API of a real server.

Runner down, slower than the timeout, answering 500, garbage, ``ok: false``
(its Docker is down) or 401: each gives its documented status, code and
message, no other setting is lost, and the next request works.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.live_server import free_port
from tests.support.standin_fixture import StandinRunner

from .conftest import MATRIXLAB_TOKEN, Live

#: Settings the user had before the faults; none may be lost.
BEFORE = {"sandbox": {"timeout_sec": 42, "allow_network": False}, "gitpilot": {"model": "kept"}}


@pytest.fixture(autouse=True)
def user_settings(live: Live) -> None:
    """The user's settings file, written afresh for each fault."""
    (live.server.config_dir / "settings.json").write_text(json.dumps(BEFORE))


def _point_at(live: Live, url: str, token: str = "") -> None:
    answer = live.http.put(
        "/api/sandbox/config", json={"matrixlab_url": url, "matrixlab_token": token}
    )
    assert answer.status_code == 200, answer.text


def _matrixlab_run(live: Live, **extra: Any) -> Any:
    return live.run("python", "print('via runner')", backend="matrixlab", **extra)


def _assert_nothing_lost_and_next_request_works(live: Live, start_standin: Any) -> None:
    saved = json.loads((live.server.config_dir / "settings.json").read_text())
    assert saved["gitpilot"] == {"model": "kept"}
    assert saved["sandbox"]["timeout_sec"] == 42 and saved["sandbox"]["allow_network"] is False
    local = live.run("python", "print('still works')")
    assert local.status_code == 200 and local.json()["stdout"] == "still works\n", local.text
    # The server's env token wins over a saved one (docs/dev/contract.md §3): the Runner
    # expects it.
    healthy: StandinRunner = start_standin(mode="ok", token=MATRIXLAB_TOKEN)
    _point_at(live, healthy.url)
    remote = _matrixlab_run(live)
    assert remote.status_code == 200 and remote.json()["stdout"] == "via runner\n", remote.text


def _closed_port(start_standin: Any) -> str:
    return f"http://127.0.0.1:{free_port()}"


Fault = tuple[str, Callable[[Any], str], dict[str, Any], int, str, str]
FAULTS: list[Fault] = [
    ("down", _closed_port, {}, 503, "backend_unreachable", "cannot reach"),
    (
        "slow",
        lambda start: start(mode="slow", delay=10.0).url,
        {"timeout_sec": 1},
        504,  # the Runner took the run: it may be running it, so never "unreachable"
        "run_outcome_unknown",
        "did not answer within 9 s",
    ),
    ("error500", lambda start: start(mode="error500").url, {}, 502, "backend_error", "500"),
    (
        "garbage",
        lambda start: start(mode="garbage").url,
        {},
        502,
        "backend_error",
        "not a run result",
    ),
    (
        "401",
        lambda start: start(mode="ok", token="not-ours").url,
        {},
        502,
        "backend_error",
        "MATRIXLAB_BEARER_TOKEN",
    ),
]


@pytest.mark.parametrize(
    ("name", "url_of", "extra", "status", "code", "message"), FAULTS, ids=[f[0] for f in FAULTS]
)
def test_runner_fault_gives_documented_error(
    live: Live,
    start_standin: Any,
    name: str,
    url_of: Callable[[Any], str],
    extra: dict[str, Any],
    status: int,
    code: str,
    message: str,
) -> None:
    _point_at(live, url_of(start_standin))
    answer = _matrixlab_run(live, **extra)
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["code"] == code and message in body["message"], body
    assert "Traceback" not in answer.text
    _assert_nothing_lost_and_next_request_works(live, start_standin)


def test_runner_with_docker_down_is_reported_unhealthy(live: Live, start_standin: Any) -> None:
    runner = start_standin(mode="down-docker")
    _point_at(live, runner.url)
    status = live.http.put("/api/sandbox/config", json={"backend": "matrixlab"}).json()
    assert status["ok"] is False
    assert "reachable, but its Docker daemon is unavailable" in status["error"]
    answer = _matrixlab_run(live)
    assert answer.status_code in (200, 502), answer.text
    if answer.status_code == 200:  # a result that says the run failed, never a fake success
        assert answer.json()["exit_code"] != 0
    else:
        assert answer.json()["code"] == "backend_error"
    live.http.put("/api/sandbox/config", json={"backend": "subprocess"})
    _assert_nothing_lost_and_next_request_works(live, start_standin)


def test_status_stays_fast_while_the_runner_hangs(live: Live, start_standin: Any) -> None:
    """A hanging Runner must not block the server: status answers while a run waits on it."""
    import threading
    import time

    runner = start_standin(mode="slow", delay=6.0)
    _point_at(live, runner.url)
    done: list[Any] = []
    waiting = threading.Thread(target=lambda: done.append(_matrixlab_run(live, timeout_sec=3)))
    waiting.start()
    time.sleep(0.5)
    try:
        started = time.perf_counter()
        with live.server.client() as other:
            assert other.get("/api/sandbox/config").status_code == 200
        assert time.perf_counter() - started < 2.0
    finally:
        waiting.join(timeout=30)
    assert done and done[0].status_code in (200, 503), done
