"""A flood of output in a ``%%sandbox`` cell: a bounded scroll box, saved in the notebook.

The notebook is executed by nbclient in a real kernel and written to disk as Jupyter
writes it, then read back as a reopened notebook would be.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from nbclient import NotebookClient

from gitpilot_jupyter.kernel.display import CellEcho
from gitpilot_jupyter.kernel.overflow import INLINE_CHARS, INLINE_LINES
from gitpilot_jupyter.sandbox.display import OUTPUT_BOX_MAX_HEIGHT as BOX_MAX_HEIGHT
from gitpilot_jupyter.sandbox.sync import run_sync

#: 510 KB of output (just under the 512 KB cap), the size that made a cell 68,544 px tall.
FLOOD_LINES = 34_000
FLOOD = f"for i in range({FLOOD_LINES}):\n    print(f'line {{i:05}} ' + 'x' * 3)\n"


def test_a_flood_is_a_bounded_scroll_box_kept_in_the_saved_notebook(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext gitpilot_jupyter"),
        nbformat.v4.new_code_cell("%%sandbox --timeout 60\n" + FLOOD),
    ]
    NotebookClient(
        nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    saved = tmp_path / "flood.ipynb"
    nbformat.write(nb, saved)
    outputs = nbformat.read(saved, as_version=4).cells[1].outputs

    streamed = "".join(o.text for o in outputs if o.output_type == "stream" and o.name == "stdout")
    footer = streamed.splitlines()[-1]
    # Only the first lines stream into the cell, then the footer below the box.
    assert streamed.count("\n") <= INLINE_LINES + 1
    assert streamed.startswith("line 00000 xxx\n")
    assert footer.startswith("[sandbox] ") and "exit 0" in footer

    (box,) = [o for o in outputs if o.output_type == "display_data"]
    html = box.data["text/html"]
    assert f"max-height:{BOX_MAX_HEIGHT};overflow:auto" in html  # bounded, it scrolls
    assert f"{FLOOD_LINES - INLINE_LINES:,} more lines" in html
    # The rest of the output, whole, in the box and in its plain-text twin: nothing lost.
    plain = box.data["text/plain"]
    assert plain.startswith(f"line {INLINE_LINES:05} xxx\n")
    assert plain.endswith(f"line {FLOOD_LINES - 1:05} xxx\n")
    assert plain.count("\n") == FLOOD_LINES - INLINE_LINES
    assert f"line {FLOOD_LINES - 1:05} xxx" in html
    # The box sits between the streamed lines and the footer.
    kinds = [o.output_type for o in outputs]
    assert kinds.index("display_data") < max(i for i, k in enumerate(kinds) if k == "stream")


def test_one_long_line_and_stderr_keep_the_budget_and_their_order(
    shell: InteractiveShell,
) -> None:
    echo = CellEcho()
    with capture_output() as cap:
        run_sync(echo("stdout", "y" * 50_000))
        run_sync(echo("stderr", "oops\n"))
        echo.finish()
    assert cap.stdout == "y" * INLINE_CHARS  # one line without a newline is cut too
    box = cap.outputs[-1].data
    assert box["text/plain"] == "y" * (50_000 - INLINE_CHARS) + "oops\n"
    # stderr keeps its place after stdout and stands out as JupyterLab's stderr does.
    assert box["text/html"].index("yyy") < box["text/html"].index(
        "<span style='background:var(--jp-rendermime-error-background, #fdd)'>oops\n</span>"
    )
