"""``%%sandbox`` and ``%sandbox`` through a real InteractiveShell on the in-process path."""

from __future__ import annotations

import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import ipywidgets as ipw
import pytest
from IPython.core.error import StdinNotImplementedError, UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from traitlets.config import Config

from gitpilot_jupyter.kernel.display import SandboxBlocked, SandboxRunError, SandboxUnavailable
from gitpilot_jupyter.kernel.magics import NO_SERVER_NOTE, SandboxMagics
from gitpilot_jupyter.sandbox.policy import ENV_ALLOWLIST_ENV
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.sync import run_sync
from tests.support.cards import approve
from tests.support.system import require_system


def cell(shell: InteractiveShell, line: str, code: str) -> Any:
    return shell.run_cell_magic("sandbox", line, code)


def test_hello_streams_output_and_prints_the_footer(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    cell(shell, "--out r", "import sys\nprint('hello')\nprint('careful', file=sys.stderr)\n")
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == "hello"
    assert "careful" in err
    footer = out.splitlines()[-1]
    assert footer.startswith("[sandbox] subprocess · exit 0 · ")
    assert footer.endswith(" · in-process")
    envelope = shell.user_ns["r"]
    assert envelope["exit_code"] == 0
    assert envelope["stdout"] == "hello\n"
    assert envelope["stderr"] == "careful\n"
    assert envelope["backend"] == "subprocess"
    assert envelope["plan_id"].startswith("plan_")
    json.dumps(envelope)  # the envelope is plain JSON data


@pytest.mark.parametrize(
    ("language", "code"),
    [("bash", "echo from-bash"), ("js", "console.log('from-' + 'js')"), ("py", "print('from-py')")],
)
def test_languages_and_aliases(shell: InteractiveShell, language: str, code: str) -> None:
    if language == "js":
        require_system("node", shutil.which("node") is not None, "javascript snippets need node")
    with capture_output() as cap:
        cell(shell, f"{language} --out r", code)
    assert shell.user_ns["r"]["exit_code"] == 0, shell.user_ns["r"]["stderr"]
    assert cap.stdout.startswith("from-")


def test_default_language_is_configurable_with_config(shell: InteractiveShell) -> None:
    shell.run_line_magic("config", "SandboxMagics.default_language = 'bash'")
    with capture_output() as cap:
        cell(shell, "", "echo $((6 * 7))")
    assert cap.stdout.startswith("42\n")


def test_config_object_reaches_the_magics() -> None:
    InteractiveShell.clear_instance()
    config = Config()
    config.SandboxMagics.server = "local"
    config.SandboxMagics.show_footer = False
    ip = InteractiveShell.instance(config=config)
    try:
        ip.run_line_magic("load_ext", "gitpilot_jupyter")
        with capture_output() as cap:
            ip.run_cell_magic("sandbox", "", "print('quiet')")
        assert cap.stdout == "quiet\n"
    finally:
        InteractiveShell.clear_instance()


def test_non_zero_exit_raises_a_short_error(shell: InteractiveShell) -> None:
    with capture_output() as cap, pytest.raises(SandboxRunError) as info:
        cell(shell, "--out r", "raise ValueError('boom')")
    assert "ValueError: boom" in cap.stderr
    assert info.value.returncode == 1
    assert info.value._render_traceback_() == [
        "SandboxRunError: the python snippet exited with code 1"
    ]
    assert shell.user_ns["r"]["exit_code"] == 1  # --out is stored before raising


def test_a_failing_cell_shows_one_line_not_a_traceback(shell: InteractiveShell) -> None:
    with capture_output() as cap:
        result = shell.run_cell("%%sandbox bash\nexit 3\n")
    assert isinstance(result.error_in_exec, SandboxRunError)
    assert "SandboxRunError: the bash snippet exited with code 3" in cap.stdout + cap.stderr
    assert "Traceback" not in cap.stdout + cap.stderr


def test_no_raise_error_flag_and_config(shell: InteractiveShell) -> None:
    with capture_output():
        cell(shell, "bash --no-raise-error --out r", "exit 4")
    assert shell.user_ns["r"]["exit_code"] == 4
    shell.run_line_magic("config", "SandboxMagics.raise_error = False")
    with capture_output():
        cell(shell, "bash --out r", "exit 5")
    assert shell.user_ns["r"]["exit_code"] == 5


def test_timeout_kills_and_keeps_earlier_output(shell: InteractiveShell) -> None:
    started = time.monotonic()
    with capture_output() as cap, pytest.raises(SandboxRunError, match="timed out"):
        cell(shell, "--timeout 1 --out r", "print('before', flush=True)\nwhile True: pass\n")
    assert time.monotonic() - started < 30
    envelope = shell.user_ns["r"]
    assert envelope["timed_out"] is True
    assert envelope["exit_code"] == -1
    assert envelope["stdout"] == "before\n"
    assert "timed out" in cap.stdout.splitlines()[-1]


def test_stdin_from_a_variable(shell: InteractiveShell) -> None:
    shell.user_ns["answers"] = "Ada\n36\n"
    code = "name = input()\nage = int(input())\nprint(f'{name} is {age}')"
    with capture_output() as cap:
        cell(shell, "--stdin answers", code)
    assert cap.stdout.startswith("Ada is 36\n")
    shell.user_ns["raw"] = b"bytes too\n"
    with capture_output() as cap:
        cell(shell, "--stdin raw", "print(input())")
    assert cap.stdout.startswith("bytes too\n")


def test_input_without_stdin_fails_fast(shell: InteractiveShell) -> None:
    started = time.monotonic()
    with capture_output() as cap, pytest.raises(SandboxRunError):
        cell(shell, "--timeout 60", "input('name? ')")
    assert time.monotonic() - started < 20
    assert "EOFError" in cap.stderr


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("--bogus", "unrecognized arguments: --bogus"),
        ("--timeout soon", "invalid int value"),
        ("--timeout 0", "timeout"),
        ("--timeout 601", "timeout"),
        ("--backend docker", "unknown sandbox backend 'docker'"),
        ("cobol", "unknown language 'cobol'"),
        ("--stdin nothing_here", "no variable named 'nothing_here'"),
        ("--stdin number", "must be str or bytes"),
        ("--network --no-network", "not both"),
    ],
)
def test_bad_flags_give_a_one_line_usage_error(
    shell: InteractiveShell, line: str, message: str
) -> None:
    shell.user_ns["number"] = 42
    with pytest.raises(UsageError) as info:
        cell(shell, line, "print('never')")
    text = str(info.value)
    assert message in text
    assert "\n" not in text.strip()


def test_empty_cell_is_a_usage_error(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="empty_code"):
        cell(shell, "", "   \n")


def test_blocked_plan_never_runs_and_says_why(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(SandboxBlocked, match=r"destructive pattern 'rm -rf /'"):
        cell(shell, "bash --yes --out r", f"touch {marker}\nrm -rf /\n")
    assert not marker.exists()
    assert "r" not in shell.user_ns
    assert "[sandbox]" not in capsys.readouterr().out


def test_high_warning_shows_the_card_and_waits(
    shell: InteractiveShell, magics: SandboxMagics, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = "import subprocess\nprint(subprocess.run(['echo', 'child'], capture_output=True,"
    code += " text=True).stdout, end='')"
    focused: list[Any] = []
    send = ipw.Widget.send
    monkeypatch.setattr(
        ipw.Widget,
        "send",
        lambda w, content, buffers=None: (
            focused.append(w) if content == {"do": "focus"} else None,
            send(w, content, buffers),
        ),
    )
    with capture_output() as cap:
        cell(shell, "--out r", code)
    assert cap.stdout == ""  # nothing ran yet
    # Shown with the keyboard focus on Reject (Enter by habit never approves it).
    assert focused == [magics.card.reject_button]
    widget_views = [o for o in cap.outputs if "application/vnd.jupyter.widget-view+json" in o.data]
    assert len(widget_views) == 1
    card = magics.card
    assert card is not None and card.state == "pending"
    assert (
        card.model_id
        == widget_views[0].data["application/vnd.jupyter.widget-view+json"]["model_id"]
    )
    approve(card)
    assert card.state == "done"
    assert shell.user_ns["r"]["stdout"] == "child\n"  # --out is stored after the click
    texts = "".join(o.get("text", "") for o in card.output.outputs)
    assert texts.startswith("child\n")
    assert "[sandbox] subprocess · exit 0" in texts


def test_yes_skips_the_card(shell: InteractiveShell, magics: SandboxMagics) -> None:
    with capture_output() as cap:
        cell(shell, "--yes --out r", "import subprocess\nprint('ran at once')")
    assert magics.card is None
    assert cap.stdout.startswith("ran at once\n")


class Recorder:
    """A stand-in for sys.stdout / sys.stderr that timestamps every write."""

    def __init__(self, name: str, log: list[tuple[float, str, str]]) -> None:
        self.name, self.log = name, log

    def write(self, text: str) -> int:
        if text:
            self.log.append((time.monotonic(), self.name, text))
        return len(text)

    def flush(self) -> None:
        pass


def test_output_streams_in_order_while_the_snippet_runs(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[tuple[float, str, str]] = []
    monkeypatch.setattr(sys, "stdout", Recorder("stdout", log))
    monkeypatch.setattr(sys, "stderr", Recorder("stderr", log))
    code = (
        "import sys, time\n"
        "print('out-1', flush=True)\n"
        "time.sleep(0.4)\n"
        "print('err-1', file=sys.stderr, flush=True)\n"
        "time.sleep(0.4)\n"
        "print('out-2', flush=True)\n"
    )
    cell(shell, "", code)
    monkeypatch.undo()
    chunks = [(stream, text) for _, stream, text in log if text.strip()]
    names = [text.strip() for _, text in chunks]
    assert names[:3] == ["out-1", "err-1", "out-2"], chunks
    assert [stream for stream, _ in chunks[:3]] == ["stdout", "stderr", "stdout"]
    assert names[3].startswith("[sandbox]")
    times = {text.strip(): t for t, _, text in log if text.strip()}
    # Each chunk arrived while the snippet was still sleeping, not all at the end.
    assert times["out-2"] - times["out-1"] > 0.5


def test_line_status_config_and_last(
    shell: InteractiveShell, sandbox_config_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert shell.run_line_magic("sandbox", "last") is None
    shell.run_line_magic("sandbox", "status")
    out = capsys.readouterr().out
    assert "backend          subprocess  (ok)" in out
    assert "in-process" in out

    shell.run_line_magic("sandbox", "config timeout_sec=33 allow_network=false")
    assert "timeout_sec        33" in capsys.readouterr().out
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())["sandbox"]
    assert saved == {"timeout_sec": 33, "allow_network": False}

    cell(shell, "bash", "echo last-one")
    capsys.readouterr()
    last = shell.run_line_magic("sandbox", "last")
    assert last["stdout"] == "last-one\n"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("", "usage: %sandbox status"),
        ("reboot", "unknown subcommand 'reboot'"),
        ("config timeout_sec=9999", "between 1 and 600"),
        ("config colour=blue", "unknown setting 'colour'"),
        ("config timeout_sec", "KEY=VALUE"),
        ("config backend=docker", "unknown sandbox backend"),
        ("debug --everything", "usage: %sandbox debug"),
        ("config matrixlab_image='unclosed", "No closing quotation"),
        ("plans everything", "usage: %sandbox plans"),
        ("approve", "usage: %sandbox approve PLAN_ID"),
        ("approve plan_0123456789abcdef", "[plan_not_found]"),
    ],
)
def test_line_magic_errors(shell: InteractiveShell, line: str, message: str) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        shell.run_line_magic("sandbox", line)


@pytest.mark.usefixtures("allow_off")
def test_backend_flag_and_env_override(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An off plan carries a high-severity warning: its card waits for a click, or --yes.
    with capture_output():
        cell(shell, "--backend off --out r", "print('host')")
    assert "r" not in shell.user_ns
    with capture_output():
        cell(shell, "--backend off --yes --out r", "print('host')")
    assert shell.user_ns["r"]["backend"] == "off"
    monkeypatch.setenv("GITPILOT_SANDBOX", "off")
    with capture_output():
        cell(shell, "--yes --out r", "print('host')")
    assert shell.user_ns["r"]["backend"] == "off"
    with capture_output():
        cell(shell, "--backend subprocess --out r", "print('sandboxed')")
    assert shell.user_ns["r"]["backend"] == "subprocess"


@pytest.mark.usefixtures("allow_off")
def test_config_asks_before_switching_to_off(
    shell: InteractiveShell, sandbox_config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter(["no", "yes"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(answers))
    with capture_output() as out:
        shell.run_line_magic("sandbox", "config backend=off")
    assert "No isolation: runs on the host as you, network not blocked" in out.stdout
    assert "Not saved" in out.stdout
    assert not (sandbox_config_dir / "settings.json").exists()
    with capture_output() as out:
        shell.run_line_magic("sandbox", "config backend=off")
    assert 'backend            "off"' in out.stdout


@pytest.mark.usefixtures("allow_off")
def test_config_to_off_without_a_way_to_ask_needs_yes(
    shell: InteractiveShell, sandbox_config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_stdin(prompt: str = "") -> str:
        raise StdinNotImplementedError("raw_input was called, but this frontend does not support")

    monkeypatch.setattr("builtins.input", no_stdin)
    with capture_output(), pytest.raises(UsageError, match="add --yes"):
        shell.run_line_magic("sandbox", "config backend=off")
    assert not (sandbox_config_dir / "settings.json").exists()
    with capture_output():
        shell.run_line_magic("sandbox", "config --yes backend=off")
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())["sandbox"]
    assert saved == {"backend": "off"}


def test_settings_shows_the_panel(shell: InteractiveShell, sandbox_config_dir: Path) -> None:
    from gitpilot_jupyter.widgets.panel import SandboxSettingsPanel

    panel = shell.run_line_magic("sandbox", "settings")  # the cell's result: shown by the kernel
    assert isinstance(panel, SandboxSettingsPanel)
    assert panel.model.path == "in-process"
    panel.timeout.value = 12
    panel.save.click()
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())["sandbox"]
    assert saved == {"timeout_sec": 12}


def test_debug_walks_the_path(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        shell.run_line_magic("sandbox", "debug")
        failed = False
    except UsageError as error:
        assert "diagnostic stage failed" in str(error)
        failed = True
    out = capsys.readouterr().out
    assert out.count("PASS") + out.count("FAIL") + out.count("SKIP") >= 4
    assert ("FAILED" in out) == failed
    if failed:
        assert "fix: " in out  # every failure says how to fix it


def test_network_flags_reach_the_run(shell: InteractiveShell) -> None:
    with capture_output():
        cell(shell, "--no-network --out closed", "print(1)")
        cell(shell, "--network --out open", "print(1)")
    closed, opened = shell.user_ns["closed"]["isolation"], shell.user_ns["open"]["isolation"]
    require_system("network namespaces", "netns" in closed, "no netns isolation on this machine")
    assert "netns" not in opened  # --network lifts exactly the network layer
    assert set(closed) - set(opened) == {"netns"}


def test_plans_in_process_says_so_and_lists_the_local_store(
    shell: InteractiveShell, magics: SandboxMagics
) -> None:
    with capture_output() as cap:
        shell.run_line_magic("sandbox", "plans")
    assert NO_SERVER_NOTE in cap.stdout and "SandboxMagics.server" in cap.stdout
    assert "no plans are waiting for approval" in cap.stdout and magics.plan_cards == []

    with capture_output():
        cell(shell, "", "import subprocess\nprint('cell plan')")  # waits on its card
    with capture_output() as cap:
        shell.run_line_magic("sandbox", "plans")
    # A cell's plan is decided on its own card: it waits for nobody else.
    assert "no plans are waiting for approval" in cap.stdout and magics.plan_cards == []
    service = magics.client.service  # type: ignore[attr-defined]
    agent = run_sync(service.plan(RunOptions(language="python", code="print('agent')"), agent=True))
    with capture_output() as cap:
        shell.run_line_magic("sandbox", "plans")
    assert NO_SERVER_NOTE in cap.stdout
    [card] = magics.plan_cards
    assert card.plan.plan_id == agent.plan_id
    assert "source <b>agent</b>" in card.children[0].value
    approve(card)  # approves only: nothing runs in the listing's card
    assert card.state == "approved" and card.output.outputs == ()
    assert service.plans.waiting() == []
    # The cell's card rejected: the plan leaves the service too.
    magics.card.reject_button.click()
    assert service.plans.pending() == []


def test_the_extension_wires_the_widgets_in_and_the_kernel_does_not_import_them(
    magics: SandboxMagics,
) -> None:
    from gitpilot_jupyter.widgets.views import WidgetViews

    # %load_ext gitpilot_jupyter (the composition root) hands the magic its views.
    assert isinstance(magics.views, WidgetViews)
    # A magic registered without them says how to load it, instead of failing late.
    bare = SandboxMagics(shell=None, server="local")
    with pytest.raises(UsageError, match="%load_ext gitpilot_jupyter"):
        bare.sandbox_line("settings")
    with pytest.raises(UsageError, match="%load_ext gitpilot_jupyter"):
        bare.sandbox_cell("", "import subprocess\nprint('needs a card')")


def test_a_host_that_cannot_contain_a_run_refuses_the_cell_with_the_reason(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No engine (no file-system wall): the cell is refused before any approval, with the
    # reason and the fix, and nothing of it runs.
    monkeypatch.setenv("GITPILOT_SANDBOX_ISOLATION", "none")
    marker = tmp_path / "ran"
    with pytest.raises(UsageError) as info:
        cell(shell, "python --yes", f"open({str(marker)!r}, 'w').close()")
    text = str(info.value)
    assert "cannot keep a snippet away from your files" in text, text
    assert "GITPILOT_SANDBOX_ALLOW_UNCONTAINED=1" in text, text
    assert not marker.exists()


def test_env_passes_only_a_listed_variable(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KERNEL_SITE", "listed-value")
    monkeypatch.setenv("KERNEL_OTHER", "kept-back")
    monkeypatch.setenv(ENV_ALLOWLIST_ENV, "KERNEL_SITE")
    code = "import os; print(os.environ.get('KERNEL_SITE'), os.environ.get('KERNEL_OTHER'))"
    with pytest.raises(UsageError, match="KERNEL_OTHER may not be passed"):
        cell(shell, "--yes --env KERNEL_OTHER", code)
    with capture_output() as cap:
        cell(shell, "--yes --env KERNEL_SITE", code)
    assert cap.stdout.startswith("listed-value None\n")


def test_an_unreachable_runner_is_a_plain_sentence_not_a_usage_error(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Port 9 on loopback: nothing listens, the connection is refused at once.
    monkeypatch.setenv("GITPILOT_MATRIXLAB_URL", "http://127.0.0.1:9")
    with pytest.raises(SandboxUnavailable) as outage:
        cell(shell, "--backend matrixlab", "print('never sent')")
    assert not isinstance(outage.value, UsageError)  # not the user's mistake
    (shown,) = outage.value._render_traceback_()
    assert shown.startswith(
        "SandboxUnavailable: the sandbox is not available: cannot reach the MatrixLab Runner "
        "at http://127.0.0.1:9"
    )
    assert "Check that it runs and the URL is right" in shown  # the fix
    assert "[backend_unreachable]" not in shown and "UsageError" not in shown


def test_a_real_usage_error_stays_a_usage_error(shell: InteractiveShell) -> None:
    with pytest.raises(UsageError, match="empty_code"):
        cell(shell, "", "   \n")
