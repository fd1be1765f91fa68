"""``%%sandbox --input PATH`` in a real InteractiveShell: the cell reads the notebook's files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from tests.support.inputs import READ_BOTH, READ_BOTH_OUT, make_project, untouched


@pytest.fixture
def beside_the_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The kernel's folder (the notebook's) holds the data."""
    project = make_project(tmp_path / "notebook")
    monkeypatch.chdir(project)
    return project


def test_the_cell_reads_the_files_it_was_given(
    shell: InteractiveShell, beside_the_notebook: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shell.run_cell_magic("sandbox", "--input sales.csv --input data --out r", READ_BOTH)
    out = capsys.readouterr().out
    assert out.startswith(READ_BOTH_OUT)
    assert shell.user_ns["r"]["stdout"] == READ_BOTH_OUT
    assert untouched(beside_the_notebook)


def test_a_symlink_out_of_the_notebooks_folder_is_a_usage_error(
    shell: InteractiveShell, beside_the_notebook: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("no\n")
    os.symlink(secret, beside_the_notebook / "data" / "leak.txt")
    with pytest.raises(UsageError, match=r"data/leak\.txt"):
        shell.run_cell_magic("sandbox", "--input data", "print('never')")
