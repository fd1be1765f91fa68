"""notebooks/05-batch-grading.ipynb runs top to bottom and says what it should, both ways a
user opens it (launched from a Jupyter server with the extension, and alone), twice in the same
folder, with only what ``make run`` installs (the opener's environment)."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from tests.notebooks.test_notebooks import mode, opener, text, widget_shown

__all__ = ["mode", "opener"]  # the fixtures, shared with tests/notebooks


@pytest.fixture(autouse=True)
def venv_kernelspec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels run this virtualenv's python, whatever kernelspecs the user has."""
    monkeypatch.setenv("JUPYTER_PATH", os.path.join(sys.prefix, "share", "jupyter"))


def test_05_batch_grading_twice_in_the_same_folder_with_what_make_run_installs(
    opener: Any,
) -> None:
    opener("05-batch-grading.ipynb", times=2)  # with what make run installs
    first, second = opener.runs
    for cells in (first, second):
        plan = text(cells["plan"])
        assert "5 snippets (1 bash, 4 python)" in plan
        assert "warning (high): os.system: 1 item(s)" in plan and "high-risk items: dave" in plan
        assert "BLOCKED (never run): 1: eve" in plan and "4 of 5 will run" in plan
        assert "os.system('echo 55')" in text(cells["show"])
        assert widget_shown(cells["run"])
        html = "".join(o.get("data", {}).get("text/html", "") for o in cells["run"].outputs)
        assert "dataframe" in html and "<th>summary</th>" in html
        assert text(cells["grades"]).splitlines() == [
            "alice  ok         55",
            "bob    timed_out  ",
            "carol  failed     ZeroDivisionError: division by zero",
            "dave   ok         55",
            "eve    blocked    destructive pattern 'rm -rf /'",
        ]
        again = text(cells["again"])
        assert "5 items · 1 failed · 1 timed out · 1 blocked · 2 ok (5 already done)" in again
        assert "eve" in text(cells["again"], "result")  # the whole table, not an empty one
        for cell in [cell for cell in cells.values() if cell.cell_type == "code"]:
            # No error, no warning: nothing on stderr.
            assert not [o for o in cell.get("outputs", []) if o.get("name") == "stderr"], cell.id
            assert not text(cell, "error"), cell.id
    # The second Run All found every result in the file and ran nothing again.
    assert "(5 already done)" in text(second["run"])
    assert len((opener.where.workdir / "grades.jsonl").read_text().splitlines()) == 5
