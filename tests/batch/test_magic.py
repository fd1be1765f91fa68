"""``%sandbox batch`` in a real ipykernel: a progress bar, then a DataFrame (or a list of dicts)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from gitpilot_jupyter.kernel import batch as batch_magic
from gitpilot_jupyter.sandbox.batch import read_results
from tests.kernel.test_in_kernel import messages_until_idle, run

SETUP = """
items = [{"id": f"n{i}", "language": "python", "code": f"print({i} * 3)"} for i in range(6)]
items.append({"id": "wipe", "language": "bash", "code": "rm -rf /"})
"""


def test_in_a_kernel_it_shows_a_progress_bar_then_a_dataframe(kernel: Any, tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    run(kernel, SETUP)
    messages = run(kernel, f"df = %sandbox batch items --out {out} --workers 2\ndf")
    widgets = [
        m
        for m in messages
        if m["msg_type"] == "comm_open"
        and m["content"]["data"]["state"].get("_model_name") == "IntProgressModel"
    ]
    assert len(widgets) == 1, "no progress bar was shown"
    bar = widgets[0]["content"]["comm_id"]
    updates = [
        m["content"]["data"]["state"]["value"]
        for m in messages
        if m["msg_type"] == "comm_msg"
        and m["content"]["comm_id"] == bar
        and "value" in m["content"]["data"].get("state", {})
    ]
    assert max(updates) == 7
    [table] = [m["content"]["data"] for m in messages if m["msg_type"] == "execute_result"]
    assert "text/html" in table and "dataframe" in table["text/html"]
    check = run(kernel, "print(sorted(df['id'])); print(df.set_index('id').loc['n4', 'stdout'])")
    text = "".join(m["content"]["text"] for m in check if m["msg_type"] == "stream")
    assert "['n0', 'n1', 'n2', 'n3', 'n4', 'n5', 'wipe']" in text and "12" in text
    assert sorted(json.loads(line)["id"] for line in out.read_text().splitlines())[-1] == "wipe"


def test_without_pandas_the_results_are_a_list_of_dicts(
    shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)  # as if pandas were not installed
    shell.run_cell(SETUP)
    results = shell.run_line_magic("sandbox", "batch items")
    assert isinstance(results, list) and len(results) == 7
    assert list(results[0])[:5] == ["id", "status", "exit_code", "summary", "duration_ms"]
    by_id = {r["id"]: r for r in results}
    assert by_id["n2"]["stdout"] == "6\n" and by_id["wipe"]["status"] == "blocked"


RISKY = 'risky = [{"id": "r", "language": "python", "code": "import os; os.system(\'echo hi\')"}]'


def shown_by(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What the batch magic displays (its card, its progress bar), in order."""
    shown: list[Any] = []
    monkeypatch.setattr(batch_magic, "display", shown.append)
    return shown


def test_a_high_risk_batch_shows_a_card_that_runs_once_ticked_and_approved(
    shell: InteractiveShell, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "results.jsonl"
    shown = shown_by(monkeypatch)
    shell.run_cell(RISKY + '\nrisky.append({"id": "q", "language": "bash", "code": "echo q"})')
    assert shell.run_line_magic("sandbox", f"batch risky --out {out}") is None
    [card] = shown
    plan = card.children[0].value
    assert "2 snippets" in plan and "high-risk items: r" in plan
    assert "os.system(&#x27;echo hi&#x27;)" in plan  # the risky item's code, escaped
    # Nothing runs until the tick box says the risky items were looked at.
    assert card.approve_button.disabled
    card.approve()
    assert card.state == "pending" and not out.exists()
    card.looked.value = True
    assert not card.approve_button.disabled
    card.approve_button.click()
    assert card.state == "done"
    assert list(card.table["id"]) == ["r", "q"] and list(card.table["summary"]) == ["hi", "q"]
    said = "".join(o.get("text", "") for o in card.output.outputs)
    assert "2 items · 2 ok" in said
    assert card.approve_button.disabled and card.reject_button.disabled  # decided once
    assert len(read_results(out)) == 2


def test_rejecting_the_card_runs_nothing_and_yes_approves_without_it(
    shell: InteractiveShell,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "results.jsonl"
    shown = shown_by(monkeypatch)
    shell.run_cell(RISKY)
    shell.run_line_magic("sandbox", f"batch risky --out {out}")
    [card] = shown
    card.looked.value = True
    card.reject_button.click()
    card.approve_button.click()  # too late: the card decided
    assert card.state == "rejected" and not out.exists()
    shell.run_line_magic("sandbox", "batch risky --show r")
    assert "os.system('echo hi')" in capsys.readouterr().out
    table = shell.run_line_magic("sandbox", f"batch risky --out {out} --yes")
    assert list(table["status"]) == ["ok"] and len(shown) == 2  # a progress bar, no card
    with pytest.raises(UsageError, match="usage"):
        shell.run_line_magic("sandbox", "batch")


def test_interrupting_the_kernel_stops_the_batch_and_keeps_what_finished(
    kernel: Any, tmp_path: Path
) -> None:
    out = tmp_path / "results.jsonl"
    quick = '[{"id": "q", "language": "bash", "code": "echo q"}]'
    slow = '[{"id": f"s{i}", "language": "bash", "code": "sleep 60"} for i in range(3)]'
    run(kernel, f"both = {quick} + {slow}")
    msg_id = kernel.execute(f"table = %sandbox batch both --out {out} --workers 4")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out.exists() and out.read_text()):
        time.sleep(0.1)
    time.sleep(0.5)
    kernel.parent.interrupt_kernel()
    seen = messages_until_idle(kernel, msg_id)
    text = "".join(m["content"].get("text", "") for m in seen if m["msg_type"] == "stream")
    assert "3 item(s) not run" in text and "run the same command again" in text
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["q"]
    check = run(kernel, "print(list(table['id']))")
    assert "['q']" in "".join(m["content"].get("text", "") for m in check)


def test_a_rerun_answers_the_whole_results_table_teachers_columns_first(
    shell: InteractiveShell, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.jsonl"
    shell.run_cell(SETUP + 'items.append({"id": "oops", "language": "python", "code": "1 / 0"})')
    first = shell.run_line_magic("sandbox", f"batch items --out {out}")
    capsys.readouterr()
    # Nothing left to run: the table is still every row of the file, in the batch's order.
    again = shell.run_line_magic("sandbox", f"batch items --out {out}")
    said = capsys.readouterr().out
    assert "8 items · 1 failed · 1 blocked · 6 ok (8 already done)" in said
    assert list(again["id"]) == list(first["id"]) == [*(f"n{i}" for i in range(6)), "wipe", "oops"]
    assert list(again.columns[:5]) == ["id", "status", "exit_code", "summary", "duration_ms"]
    assert again.columns[-1] == "digest"
    summary = again.set_index("id")["summary"]
    assert summary["n4"] == "12" and summary["oops"] == "ZeroDivisionError: division by zero"
    assert summary["wipe"] == "destructive pattern 'rm -rf /'"
    # One item changed: it runs again, and the table still holds all eight.
    shell.run_cell('items[0]["code"] = "print(100)"')
    third = shell.run_line_magic("sandbox", f"batch items --out {out}")
    assert len(third) == 8 and third.set_index("id")["summary"]["n0"] == "100"
    assert "(7 already done)" in capsys.readouterr().out


def test_the_batch_card_runs_on_a_frontend_tick_and_click(kernel: Any, tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    # Keep a handle on what the magic displays, to find the card's widget models.
    run(kernel, "from gitpilot_jupyter.kernel import batch as b\nshown = []\n" + RISKY)
    run(kernel, "b.display, show = (lambda w: (shown.append(w), show(w))), b.display")
    run(kernel, f"%sandbox batch risky --out {out}")
    ids = run(
        kernel,
        "c = shown[0]\nprint(c.looked.model_id, c.approve_button.model_id, c.output.model_id)",
    )
    looked, button, output = "".join(
        m["content"]["text"] for m in ids if m["msg_type"] == "stream"
    ).split()

    def send(comm_id: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        msg = kernel.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        kernel.shell_channel.send(msg)
        return messages_until_idle(kernel, msg["header"]["msg_id"])

    click = {"method": "custom", "content": {"event": "click"}}
    send(button, click)  # not ticked yet: nothing runs
    assert not out.exists()
    send(looked, {"method": "update", "state": {"value": True}, "buffer_paths": []})
    updates = send(button, click)
    outputs: list[dict[str, Any]] = []
    for m in updates:
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == output:
            outputs = m["content"]["data"].get("state", {}).get("outputs", outputs)
    said = "".join(o.get("text", "") for o in outputs)
    assert "1 item · 1 ok" in said
    assert any("text/html" in o.get("data", {}) for o in outputs)  # the table, in the card
    assert [json.loads(line)["stdout"] for line in out.read_text().splitlines()] == ["hi\n"]
