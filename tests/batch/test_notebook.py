"""notebooks/05-batch-grading.ipynb runs top to bottom in a real kernel and says what it should."""

from __future__ import annotations

from pathlib import Path

from tests.notebooks.test_notebooks import execute, text, widget_shown


def test_05_batch_grading(tmp_path: Path) -> None:
    cells = execute("05-batch-grading.ipynb", tmp_path)
    plan = text(cells["plan"])
    assert "5 snippets (1 bash, 4 python)" in plan
    assert "warning (high): os.system: 1 item(s)" in plan and "high-risk items: dave" in plan
    assert "BLOCKED (never run): 1: eve" in plan and "4 of 5 will run" in plan
    assert "os.system('echo 55')" in text(cells["show"])
    assert widget_shown(cells["run"])
    assert "dataframe" in "".join(
        o.get("data", {}).get("text/html", "") for o in cells["run"].outputs
    )
    assert text(cells["grades"]).splitlines() == [
        "alice  ok         55",
        "bob    timed_out  ",
        "carol  failed     ZeroDivisionError: division by zero",
        "dave   ok         55",
        "eve    blocked    destructive pattern 'rm -rf /'",
    ]
    assert "5 already done (skipped)" in text(cells["again"])
    assert len((tmp_path / "grades.jsonl").read_text().splitlines()) == 5
