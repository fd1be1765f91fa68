"""The text a model reads: layout of the original trace, head-and-tail shortening."""

from __future__ import annotations

from gitpilot_jupyter.agents.render import render_result, shorten
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.sessions.kernel import LOST_NOTE


def test_matrixlab_result_reads_like_the_original_trace() -> None:
    result = RunResult(
        backend="matrixlab",
        language="python",
        command=["python", "<snippet>"],
        exit_code=1,
        stderr="Traceback (most recent call last):\nValueError: boom\n",
        duration_ms=440,
        sandbox_id="db3e427d-1234",
    )
    text = render_result(result)
    assert text.splitlines() == [
        "Sandbox: MatrixLab",
        "Command: python <snippet>",
        "Exit code: 1",
        "Duration: 440 ms",
        "--- stderr ---",
        "Traceback (most recent call last):",
        "ValueError: boom",
        "sandbox_id: db3e427d-1234",
    ]


def test_timeout_and_truncation_are_stated() -> None:
    result = RunResult(
        backend="subprocess",
        language="bash",
        command=["bash", "inline.sh"],
        exit_code=-1,
        stdout="started\n",
        timed_out=True,
        truncated=True,
    )
    text = render_result(result, command="sleep 99", timeout_sec=2)
    assert "Command: sleep 99" in text
    assert "WARNING: Command timed out after 2 s" in text
    assert "WARNING: Output was truncated" in text
    assert "--- stdout ---\nstarted" in text
    assert "--- stderr ---" not in text


def test_a_stopped_run_is_stated() -> None:
    result = RunResult(
        backend="subprocess",
        language="python",
        command=["python", "inline.py"],
        exit_code=-1,
        stdout="started\n",
        cancelled=True,
    )
    text = render_result(result)
    assert "WARNING: The run was stopped before it ended (someone pressed Stop)" in text
    assert "timed out" not in text


def test_shortening_keeps_head_and_tail_and_counts_what_is_left_out() -> None:
    text = "".join(f"line {i}\n" for i in range(5000)) + "Error: the real failure\n"
    short = shorten(text, 1000)
    assert short.startswith("line 0\n")
    assert short.endswith("Error: the real failure\n")
    marker = [line for line in short.splitlines() if "bytes left out" in line]
    assert len(marker) == 1
    left_out = int(marker[0].split()[1])
    kept = len(short.encode()) - len(marker[0].encode()) - 2  # marker line and added newline
    assert abs(left_out + kept - len(text.encode())) <= 2
    assert len(short.encode()) < 1100


def test_shortening_never_splits_a_character() -> None:
    text = "é" * 5000 + "ü" * 5000
    short = shorten(text, 1001)
    assert "\ufffd" not in short
    head, _, tail = short.partition("[... ")
    assert set(head.strip()) == {"é"}
    assert set(tail.split("...]\n", 1)[1]) == {"ü"}


def test_short_output_is_left_alone() -> None:
    assert shorten("4\n", 1000) == "4\n"


def test_a_session_cell_names_its_session_and_says_when_it_was_lost() -> None:
    result = RunResult(
        backend="subprocess",
        language="python",
        command=["ipykernel", "--session", "nb"],
        exit_code=-1,
        cancelled=True,
        sandbox_id="nb",
        notes=[LOST_NOTE],
    )
    text = render_result(result, session="nb")
    assert "Session: nb (what its cells define stays for its next cells)" in text
    assert "(someone pressed Stop); the cell was interrupted" in text
    assert f"Note: {LOST_NOTE}" in text
    # A single run's notes are not listed, and its process was killed.
    plain = render_result(result)
    assert "Note:" not in plain and "the process was killed" in plain
