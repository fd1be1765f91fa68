"""``jupyter sandbox session list | restart | stop`` against a real Jupyter server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.client.server import TOKEN_ENV
from gitpilot_jupyter.wiring import cli_main
from tests.support.inputs import NOTES, READ_BOTH, READ_BOTH_OUT, make_project
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
        if started.status_code == 409 and started.json().get("code") == "session_unavailable":
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


def test_cli_cells_of_a_session_keep_their_state_and_ctrl_c_interrupts_only_the_cell(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(TOKEN_ENV, live.token)
    with live.client() as http:  # (a host that cannot hold a session: skipped with its reason)
        started = http.post("/api/sandbox/sessions", json={"name": "probe"})
        if started.status_code == 409 and started.json()["code"] == "session_unavailable":
            require_system("bwrap", False, started.json()["message"])
        assert started.status_code == 201, started.text

    def cli(*argv: str) -> tuple[int, str, str]:
        code = cli_main([*argv, "--session", "nb", "--server", live.url])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, _ = cli("plan", "--json", "-c", "x = 41")
    assert code == 0 and json.loads(out)["goal"].endswith("in session nb"), out
    assert cli("run", "--yes", "-c", "x = 41")[0] == 0
    code, out, err = cli("run", "--yes", "-c", "print(x + 1)")
    assert (code, out) == (0, "42\n"), err

    # Ctrl-C during a cell: that cell stops (as a shell's command, 130); the session lives on.
    argv = [sys.executable, "-m", "gitpilot_jupyter.wiring", "run", "--yes", "--session", "nb"]
    slow = "import time\nprint('started', flush=True)\ntime.sleep(60)"
    argv += ["--server", live.url, "-c", slow]
    cell = subprocess.Popen(
        argv,
        env={**os.environ, TOKEN_ENV: live.token},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert cell.stdout is not None and cell.stdout.readline() == "started\n"
        cell.send_signal(signal.SIGINT)
        out, err = cell.communicate(timeout=30)
    finally:
        if cell.poll() is None:
            cell.kill()
    assert cell.returncode == 130, err
    assert "session nb keeps its kernel and its state" in err, err
    code, out, err = cli("run", "--yes", "-c", "print(x)")
    assert (code, out) == (0, "41\n"), err


def test_cli_cells_of_a_session_take_inputs_and_save_their_out_files(
    live: LiveServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(TOKEN_ENV, live.token)
    make_project(live.root_dir)
    monkeypatch.chdir(live.root_dir)
    with live.client() as http:
        started = http.post("/api/sandbox/sessions", json={"name": "files"})
        if started.status_code == 409 and started.json()["code"] == "session_unavailable":
            require_system("bwrap", False, started.json()["message"])
        assert started.status_code == 201, started.text
    write = "import os\nos.makedirs('out', exist_ok=True)\nopen('out/total.txt', 'w').close()"
    saved = live.root_dir / "saved"
    argv = ["run", "--yes", "--session", "files", "--server", live.url]
    code = cli_main(
        [
            *argv,
            "--input",
            "sales.csv",
            "--input",
            "data",
            "--output-dir",
            str(saved),
            "-c",
            READ_BOTH + write,
        ]
    )
    captured = capsys.readouterr()
    assert (code, captured.out) == (0, READ_BOTH_OUT), captured.err
    assert (saved / "total.txt").read_text() == ""
    # The inputs stay for the session's next cells.
    code = cli_main([*argv, "-c", "print(open('data/notes.txt').read(), end='')"])
    assert (code, capsys.readouterr().out) == (0, NOTES)
