"""notebooks/05-batch-grading.ipynb runs top to bottom and says what it should, both ways a
user opens it (launched from a Jupyter server with the extension, and alone)."""

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


def test_05_batch_grading(opener: Any) -> None:
    cells = opener("05-batch-grading.ipynb")
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
    assert len((opener.where.workdir / "grades.jsonl").read_text().splitlines()) == 5
