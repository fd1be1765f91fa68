"""``%sandbox batch`` in a real ipykernel: a progress bar, then a DataFrame (or a list of dicts)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

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


def test_high_risk_items_need_yes_and_can_be_opened(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell(
        'risky = [{"id": "r", "language": "python", "code": "import os; os.system(\'true\')"}]'
    )
    with pytest.raises(UsageError, match=r"high-severity warnings .*--yes"):
        shell.run_line_magic("sandbox", "batch risky")
    shell.run_line_magic("sandbox", "batch risky --show r")
    assert "os.system('true')" in capsys.readouterr().out
    assert list(shell.run_line_magic("sandbox", "batch risky --yes")["status"]) == ["ok"]
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
