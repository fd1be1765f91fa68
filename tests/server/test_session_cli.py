"""``jupyter sandbox session list | restart | stop`` against a real Jupyter server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.client.server import TOKEN_ENV
from gitpilot_jupyter.wiring import cli_main
from tests.support.live_server import LiveServer, start_live_server
from tests.support.system import require_system


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveServer]:
    server = start_live_server(tmp_path)
    yield server
    server.stop()


def test_the_cli_lists_restarts_and_stops_a_servers_session(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(TOKEN_ENV, live.token)
    with live.client() as http:
        started = http.post("/api/sandbox/sessions", json={"name": "nb"})
        if started.status_code == 503:
            require_system("bwrap", False, started.json()["message"])
        assert started.status_code == 201, started.text

    def cli(*argv: str) -> tuple[int, str]:
        code = cli_main([*argv, "--server", live.url])
        return code, capsys.readouterr().out

    code, out = cli("session", "list")
    assert code == 0 and out.split()[:2] == ["nb", "idle"]
    code, out = cli("session", "restart", "nb")
    assert code == 0 and "Restarted session nb" in out
    code, out = cli("session", "stop", "nb")
    assert code == 0 and "Stopped session nb" in out
    assert cli("session", "list") == (0, "no session is open\n")
    code = cli_main(["session", "stop", "nb", "--server", live.url])
    captured = capsys.readouterr()
    assert code != 0 and "no session 'nb'" in captured.err
