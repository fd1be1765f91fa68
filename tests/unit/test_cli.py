"""The `jupyter sandbox` command: real processes, real exit statuses."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local.off import OFF_HOME_CHECK
from gitpilot_jupyter.sandbox.policy import ENV_ALLOWLIST_ENV

BIN = Path(sys.executable).parent


def cli(
    *args: str, stdin: str | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "jupyter-sandbox"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )


def test_run_exits_with_the_snippets_exit_code() -> None:
    ok = cli("run", "python", "-c", "print(2+2)", "--yes")
    assert (ok.returncode, ok.stdout) == (0, "4\n")
    assert "subprocess · exit 0" in ok.stderr
    failing = cli("run", "bash", "-c", "echo oops >&2; exit 3", "--yes")
    assert failing.returncode == 3 and "oops" in failing.stderr


def test_timeout_exits_124_like_timeout1() -> None:
    result = cli("run", "bash", "-c", "sleep 30", "--timeout", "1", "--yes")
    assert result.returncode == 124 and "timed out" in result.stderr


def test_json_prints_the_envelope() -> None:
    result = cli("run", "py", "-c", "print('hi')", "--yes", "--json")
    envelope = json.loads(result.stdout)
    assert envelope["stdout"] == "hi\n" and envelope["exit_code"] == 0
    assert {"backend", "duration_ms", "truncated", "timed_out", "isolation", "run_id"} <= set(
        envelope
    )


def test_without_a_tty_and_without_yes_it_refuses_and_says_how() -> None:
    result = cli("run", "python", "-c", "print(1)", stdin="")
    assert result.returncode == 2
    assert "--yes" in result.stderr and result.stdout == ""
    assert result.stderr.rstrip().endswith("not run: the plan was not approved, nothing ran")


def test_answering_no_at_the_terminal_says_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')"
    controller, terminal = os.openpty()
    try:
        os.write(controller, b"n\n")
        declined = subprocess.run(
            [str(BIN / "jupyter-sandbox"), "run", "python", "-c", code],
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert declined.returncode == 2
    assert "Approve and run? [y/N]" in declined.stdout
    assert declined.stderr.rstrip().endswith("not run: the plan was not approved, nothing ran")
    assert not marker.exists()


def test_destructive_snippet_is_refused() -> None:
    result = cli("run", "bash", "-c", "rm -rf /", "--yes")
    assert result.returncode == 2 and "rm -rf /" in result.stderr


def test_file_run_guesses_the_language(tmp_path: Path) -> None:
    (tmp_path / "hello.sh").write_text("echo from-file\n")
    result = cli("run", "hello.sh", "--yes", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout == "from-file\n"


def test_a_file_run_is_named_after_its_file(tmp_path: Path) -> None:
    """Plan, result and traceback name the user's file, never inline.py, from a folder
    below the one the command is run in (only the file's name goes along)."""
    (tmp_path / "lesson").mkdir()
    (tmp_path / "lesson" / "hello_sandbox.py").write_text("print('hi')\n1 / 0\n")
    shown = cli("run", "lesson/hello_sandbox.py", "--yes", cwd=tmp_path)
    assert shown.returncode == 1 and shown.stdout == "hi\n"
    assert "Run hello_sandbox.py" in shown.stderr
    assert "command  python hello_sandbox.py" in shown.stderr
    assert 'hello_sandbox.py", line 2, in <module>' in shown.stderr
    assert "inline" not in shown.stderr
    plan = json.loads(cli("plan", "lesson/hello_sandbox.py", "--json", cwd=tmp_path).stdout)
    assert plan["command"] == ["python", "hello_sandbox.py"]
    envelope = json.loads(
        cli("run", "lesson/hello_sandbox.py", "-y", "--json", cwd=tmp_path).stdout
    )
    assert envelope["command"] == ["python", "hello_sandbox.py"]
    assert "hello_sandbox.py" in envelope["stderr"] and "inline" not in envelope["stderr"]


@pytest.mark.usefixtures("allow_off")
def test_config_set_and_show(sandbox_config_dir: Path) -> None:
    assert cli("config", "--set", "timeout_sec=30", "--set", "backend=off", "--yes").returncode == 0
    shown = json.loads(cli("config", "--json").stdout)
    assert shown["timeout_sec"] == 30 and shown["backend"] == "off"
    bad = cli("config", "--set", "backend=docker")
    assert bad.returncode == 2 and "unknown sandbox backend 'docker'" in bad.stderr
    assert (
        json.loads((sandbox_config_dir / "settings.json").read_text())["sandbox"]["backend"]
        == "off"
    )


def test_off_is_refused_unless_the_administrator_allows_it(sandbox_config_dir: Path) -> None:
    fix = "GITPILOT_SANDBOX_ALLOWED_BACKENDS=subprocess,matrixlab,off"
    for refused in (
        cli("config", "--set", "backend=off", stdin=""),  # not even asked: refused at once
        cli("config", "--set", "backend=off", "--yes"),
        cli("run", "python", "-c", "print(1)", "--backend", "off", "--yes"),
    ):
        assert refused.returncode != 0 and refused.stdout == ""
        assert "'off' is not allowed here" in refused.stderr and fix in refused.stderr
    assert not (sandbox_config_dir / "settings.json").exists()


@pytest.mark.usefixtures("allow_off")
def test_switching_to_off_asks_first_and_saves_nothing_unconfirmed(
    sandbox_config_dir: Path,
) -> None:
    refused = cli("config", "--set", "backend=off", "--set", "timeout_sec=30", stdin="")
    assert refused.returncode == 2
    assert "No isolation: runs on the host as you, network not blocked" in refused.stderr
    assert "--yes" in refused.stderr
    assert refused.stderr.rstrip().endswith("not saved: the settings are unchanged")
    assert not (sandbox_config_dir / "settings.json").exists()  # nothing of it was saved
    assert json.loads(cli("config", "--json").stdout)["backend"] == "subprocess"
    # Already off: no question (and other settings change freely).
    assert cli("config", "--set", "backend=off", "--yes").returncode == 0
    assert cli("config", "--set", "backend=off", "--set", "timeout_sec=20").returncode == 0


def test_ctrl_c_stops_the_run_and_kills_the_snippet() -> None:
    from tests.server.test_cancel import appears, new_marker, processes_with, sleeper

    marker = new_marker()
    proc = subprocess.Popen(
        [str(BIN / "jupyter-sandbox"), "run", "python", "-c", sleeper(marker), "--yes"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline() == "started\n"
    assert appears(marker)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "stopped after" in err and "the snippet was killed" in err
    assert "Traceback" not in err and "never printed" not in out
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(marker)


def test_token_never_printed(sandbox_config_dir: Path) -> None:
    cli("config", "--set", "matrixlab_token=tok-123456")
    assert "tok-123456" not in cli("config").stdout
    status = cli("status", "--json")
    assert "tok-123456" not in status.stdout and json.loads(status.stdout)["has_token"] is True


def test_plan_shows_warnings_and_blocks() -> None:
    plan = cli("plan", "python", "-c", "import subprocess")
    assert plan.returncode == 0 and "warning (high): subprocess" in plan.stdout
    blocked = cli("plan", "bash", "-c", ":(){ :|:& };:", "--json")
    assert blocked.returncode == 2 and json.loads(blocked.stdout)["blocked"] is True


def test_a_failed_check_says_what_it_found() -> None:
    clean = cli("plan", "bash", "-c", "echo hi")
    assert "  [ok] no destructive pattern\n" in clean.stdout
    # What the run cannot see of this host is a check of its own, like the network's.
    assert re.search(
        r"  \[(ok|!!)\] your home folder.*, ~/\.ssh and the server's secret files", clean.stdout
    )
    blocked = cli("plan", "bash", "-c", "rm -rf /")
    assert blocked.returncode == 2
    assert "  [!!] destructive pattern " in blocked.stdout and " found\n" in blocked.stdout
    assert "no destructive pattern" not in blocked.stdout


def test_pass_through_is_named_in_words(sandbox_config_dir: Path, allow_off: None) -> None:
    assert cli("config", "--set", "backend=off", "--yes").returncode == 0
    status = cli("status").stdout
    assert "backend          off, pass-through (no sandbox)  (" in status
    plan = cli("plan", "python", "-c", "print(1)").stdout
    assert "[!!] network not blocked (pass-through: no sandbox)" in plan
    assert f"[!!] {OFF_HOME_CHECK}\n" in plan
    assert "backend off ·" not in plan and "· backend off, pass-through (no sandbox) ·" in plan


def test_unknown_language_is_a_usage_error() -> None:
    result = cli("run", "ruby", "-c", "puts 1", "--yes")
    assert result.returncode == 2 and "unknown language 'ruby'" in result.stderr


def test_jupyter_launcher_finds_the_subcommand() -> None:
    result = subprocess.run(
        [str(BIN / "jupyter"), "sandbox", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and "124" in result.stdout


def pipeline(command: str, tmp_path: Path) -> tuple[bytes, int, str]:
    """``jupyter-sandbox ... | head -c 1`` in bash: what head got, the CLI's status, its stderr."""
    err = tmp_path / "stderr.txt"
    script = (
        f'{BIN / "jupyter-sandbox"} {command} 2>{err} | head -c 1; echo " ${{PIPESTATUS[0]}}" >&2'
    )
    done = subprocess.run(["bash", "-c", script], capture_output=True, timeout=120, cwd=tmp_path)
    return done.stdout, int(done.stderr.decode().split()[-1]), err.read_text()


def test_a_reader_that_stops_early_ends_the_cli_cleanly(tmp_path: Path) -> None:
    """`| head -c 1` gets its byte; the CLI exits 141 (as on SIGPIPE), with no traceback."""
    got, status, stderr = pipeline("status --json", tmp_path)
    assert got == b"{" and status in (0, 141), stderr
    assert "Traceback" not in stderr and "Exception" not in stderr
    big = "run python -c 'print(\"x\" * 2000000)' --yes"
    got, status, stderr = pipeline(big, tmp_path)
    assert (got, status) == (b"x", 141), stderr
    assert "Traceback" not in stderr and "Event loop is closed" not in stderr


def test_an_endless_snippet_stops_when_the_reader_goes(tmp_path: Path) -> None:
    marker = f"endless-{tmp_path.name}"
    code = f"while 1: print('{marker}', flush=True)"
    started = time.monotonic()
    got, status, stderr = pipeline(f'run python -c "{code}" --yes --timeout 60', tmp_path)
    assert (got, status) == (marker[:1].encode(), 141), stderr
    assert time.monotonic() - started < 30, "the run went on after its reader left"
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout == "", f"processes left behind: {left.stdout}"


def test_json_errors_are_a_json_object() -> None:
    refused = cli("run", "cobol", "-c", "x", "--yes", "--json")
    assert refused.returncode == 2 and refused.stderr == ""
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "unknown_language" and error["status"] == 400
    assert "cobol" in error["message"]
    bad = cli("config", "--set", "matrixlab_url=ftp://x", "--json")
    assert json.loads(bad.stdout)["error"]["code"] == "invalid_setting"


def test_every_flag_reaches_the_plan_through_the_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_ALLOWLIST_ENV, "CLI_PROBE")
    # The CLI used to call the service with its own mapping of flags; it now goes
    # through the client layer: each flag must still arrive in the plan.
    plan = cli(
        "plan",
        "py",
        "-c",
        "print(1)",
        "--timeout",
        "7",
        "--backend",
        "subprocess",
        "--network",
        "--env",
        "CLI_PROBE",
        "--json",
    )
    assert plan.returncode == 0, plan.stderr
    shown = json.loads(plan.stdout)
    assert (shown["language"], shown["timeout_sec"], shown["backend"]) == (
        "python",
        7,
        "subprocess",
    )
    assert shown["network"] is True and shown["env"] == ["CLI_PROBE"]
    assert shown["source"] == "api" and shown["code"] == "print(1)"
    off = json.loads(cli("plan", "bash", "-c", "true", "--no-network", "--json").stdout)
    assert off["network"] is False and off["language"] == "bash"


def test_run_passes_named_variables_and_stdin_through_the_client(tmp_path: Path) -> None:
    feed = tmp_path / "in.txt"
    feed.write_text("fed\n", encoding="utf-8")
    code = "import os; print(input(), *(os.environ.get(f'CLI_PROBE_{n}') for n in 'AB'))"
    args = ["run", "python", "-c", code, "--stdin", str(feed), "--env", "CLI_PROBE_A"]
    done = subprocess.run(
        [str(BIN / "jupyter-sandbox"), *args, "--yes", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={
            **os.environ,
            "CLI_PROBE_A": "passed-on",
            "CLI_PROBE_B": "kept-back",
            ENV_ALLOWLIST_ENV: "CLI_PROBE_A CLI_PROBE_B",
        },
    )
    assert done.returncode == 0, done.stderr
    # Only the named variable crosses; the rest of the environment (listed or not) does not.
    assert json.loads(done.stdout)["stdout"] == "fed passed-on None\n"


def test_run_refuses_a_variable_the_administrator_did_not_list() -> None:
    done = subprocess.run(
        [str(BIN / "jupyter-sandbox"), "run", "python", "-c", "1", "--env", "CLI_PROBE_C"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "CLI_PROBE_C": "kept-back", ENV_ALLOWLIST_ENV: ""},
    )
    assert done.returncode == 2 and "kept-back" not in done.stdout + done.stderr
    assert "CLI_PROBE_C may not be passed" in done.stderr and ENV_ALLOWLIST_ENV in done.stderr


def test_config_names_the_settings_file(sandbox_config_dir: Path) -> None:
    assert cli("config", "--set", "timeout_sec=31").returncode == 0
    lines = dict(line.split(None, 1) for line in cli("config").stdout.splitlines())
    assert lines["timeout_sec"] == "31"
    assert Path(lines["file"]) == sandbox_config_dir / "settings.json"


def test_matrixlab_status_answers_through_the_client() -> None:
    result = cli("matrixlab", "status", "--json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["lifecycle_enabled"] in (True, False) and "container_name" in answer


def test_the_cli_reaches_the_core_through_the_client_layer() -> None:
    # No CLI module builds or imports the service: `run`, `plan`, `status`, `config`
    # and `matrixlab` call a client; `batch` and `debug` take the local client's core.
    import ast

    package = Path(__file__).resolve().parents[2] / "gitpilot_jupyter" / "cli"
    for path in package.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules = {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {m for m in modules if "sandbox.service" in m}, path.name


def test_mcp_reaches_the_cli_only_through_the_composition_root() -> None:
    # The CLI never imports the agents: `mcp` is theirs, added by gitpilot_jupyter.wiring.
    from gitpilot_jupyter.cli import build_parser
    from gitpilot_jupyter.wiring import cli_parser

    def commands(parser: argparse.ArgumentParser) -> list[str]:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return list(action.choices)

    wired, plain = commands(cli_parser()), commands(build_parser())
    assert "mcp" not in plain and [c for c in wired if c != "mcp"] == plain
    # `--help` lists them in the order it always did.
    assert wired.index("batch") < wired.index("mcp") < wired.index("plans")
    helped = cli("mcp", "--help")
    assert helped.returncode == 0 and "--approval" in helped.stdout
