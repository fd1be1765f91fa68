"""``%%sandbox --session NAME`` and ``%sandbox session ...`` in a real kernel (nbclient),
both ways a user has it: alone (in-process) and started by a real Jupyter server (REST)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.notebooks.test_notebooks import execute_in_session
from tests.support.inputs import CSV, READ_BOTH, READ_BOTH_OUT, make_project
from tests.support.live_server import LiveServer, start_live_server
from tests.support.system import require_system

CELL_TIMEOUT_SEC = 120

CELLS = [
    "%%sandbox --session nb\nimport math\nx = 41",
    "%%sandbox --session nb\nprint(x + 1, math.pi > 3)",
    "%sandbox session list",
    "%sandbox session restart nb",
    "%%sandbox --session nb --no-raise-error\nprint('x' in dir())",
    "%sandbox session stop nb",
    "%sandbox session list",
    "%sandbox session frob",
    "%%sandbox --session ../x\nprint(1)",
    "%sandbox session stop nb",
]
#: The cells from this one on are bad input, each answered by a UsageError.
RAISES_FROM = 7


def notebook(server: str) -> nbformat.NotebookNode:
    setup = f"%load_ext gitpilot_jupyter\n%config SandboxMagics.server = {server!r}"
    cells = [nbformat.v4.new_code_cell(setup, id="setup")]
    for i, src in enumerate(CELLS):
        cell = nbformat.v4.new_code_cell(src, id=f"c{i}")
        if i >= RAISES_FROM:  # bad input: its error stays in its cell (nbclient's tag)
            cell.metadata["tags"] = ["raises-exception"]
        cells.append(cell)
    return nbformat.v4.new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    )


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_live_server(tmp_path_factory.mktemp("sessions-live"))
    yield server
    server.stop()


def text(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def error(cell: Any) -> str:
    """The cell's error: a traceback's, or the one line IPython prints for a UsageError."""
    errors = [o for o in cell.outputs if o.output_type == "error"]
    if errors:
        return f"{errors[0].ename}: {errors[0].evalue}"
    err = "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr")
    return err if err.startswith("UsageError") else ""


@pytest.mark.parametrize("path", ["in-process", "REST"])
def test_a_session_keeps_state_across_cells_and_the_line_magic_drives_it(
    path: str, request: pytest.FixtureRequest
) -> None:
    require_system("bwrap", shutil.which("bwrap") is not None, "sessions need bubblewrap")
    if path == "REST":
        nb = notebook("auto")
        live = request.getfixturevalue("live")
        execute_in_session(nb, "sessions.ipynb", live)
    else:
        nb = notebook("local")
        NotebookClient(nb, timeout=CELL_TIMEOUT_SEC, kernel_name="python3").execute()
    c = nb.cells[1:]
    for i in range(RAISES_FROM):
        assert error(c[i]) == "", (i, error(c[i]))
    assert text(c[1]).startswith("42 True\n")
    assert "[sandbox] subprocess · exit 0" in text(c[1])
    listed = text(c[2]).split()
    assert listed[:4] == ["nb", "idle", "2", "cells"]
    assert "Restarted session nb" in text(c[3])
    assert text(c[4]).startswith("False\n")  # the restart cleared the state
    assert "Stopped session nb" in text(c[5])
    assert text(c[6]).startswith("no session is open")
    assert error(c[7]).startswith("UsageError: usage: %sandbox session")
    # The name is refused before anything starts (by the core, or REST's schema first).
    assert error(c[8]).startswith("UsageError: sandbox:") and "session" in error(c[8])
    assert "invalid_session" in error(c[8]) or "'../x'" in error(c[8])
    assert error(c[9]).startswith("UsageError:") and "session_not_found" in error(c[9])


def test_a_session_cell_takes_inputs_and_saves_its_out_files(tmp_path: Path) -> None:
    require_system("bwrap", shutil.which("bwrap") is not None, "sessions need bubblewrap")
    make_project(tmp_path)
    write = "import os\nos.makedirs('out', exist_ok=True)\nopen('out/total.txt', 'w').write('42')"
    cells = [
        "%load_ext gitpilot_jupyter\n%config SandboxMagics.server = 'local'",
        "%%sandbox --session f --input sales.csv --input data --output-dir saved\n"
        + READ_BOTH
        + write,
        "%%sandbox --session f --output-dir again\nprint(open('sales.csv').read(), end='')",
        "%sandbox session stop f",
    ]
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(src, id=f"c{i}") for i, src in enumerate(cells)],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_SEC,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    c = nb.cells
    for i in range(len(cells)):
        assert error(c[i]) == "", (i, error(c[i]))
    assert text(c[1]).startswith(READ_BOTH_OUT), text(c[1])
    assert (tmp_path / "saved" / "total.txt").read_text() == "42"
    # The next cell wrote nothing new under out/: nothing saved; the inputs stayed.
    assert text(c[2]).startswith(CSV)
    assert not (tmp_path / "again").exists()
