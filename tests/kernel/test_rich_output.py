"""A ``%%sandbox`` cell's figures and tables become real cell outputs, saved in the notebook.

The notebook runs in a real kernel by nbclient, both ways a user has it: alone (the
in-process path) and started by a real Jupyter server (the REST path, streamed as
NDJSON). It is saved and read back, as reopening it would.
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from gitpilot_jupyter.client.rest import RestClient
from gitpilot_jupyter.sandbox import rich
from gitpilot_jupyter.sandbox.report import LAUNCHERS
from gitpilot_jupyter.sandbox.sync import run_sync
from tests.notebooks.test_notebooks import execute_in_session
from tests.support.figures import RED_FIGURE, assert_red_figure, require_matplotlib
from tests.support.live_server import LiveServer, start_live_server

CELL_TIMEOUT_SEC = 120

#: Text, the red figure, more text, an HTML table with a script, a figure left open.
PLOT = f"""\
%%sandbox
print("before the figure")
{RED_FIGURE}print("after the figure")
from IPython.display import HTML, display
display(HTML("<table><tr><td id='cell'>42</td></tr></table><script>alert(1)</script>"))
plt.figure(figsize=(2, 2), dpi=50)
plt.plot([1, 2, 3]);
"""


def notebook(server: str) -> nbformat.NotebookNode:
    """The extension loaded (the path ``server`` picks), then the plotting cell."""
    setup = f"%load_ext gitpilot_jupyter\n%config SandboxMagics.server = {server!r}"
    cells = [
        nbformat.v4.new_code_cell(setup, id="setup"),
        nbformat.v4.new_code_cell(PLOT, id="plot"),
    ]
    return nbformat.v4.new_notebook(
        cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}}
    )


def saved_and_reopened(nb: nbformat.NotebookNode, path: Path) -> nbformat.NotebookNode:
    nbformat.write(nb, path)
    return nbformat.read(path, as_version=4)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_live_server(tmp_path_factory.mktemp("rich-live"))
    yield server
    server.stop()


def run_alone(tmp_path: Path) -> nbformat.NotebookNode:
    nb = notebook("local")
    NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_SEC,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    return saved_and_reopened(nb, tmp_path / "plot.ipynb")


def run_on_server(server: LiveServer) -> nbformat.NotebookNode:
    """As JupyterLab opens it: a session on the server, whose kernel finds the server."""
    nb = notebook("auto")
    execute_in_session(nb, "plot.ipynb", server)
    return saved_and_reopened(nb, server.root_dir / "plot.ipynb")


def shapes(outputs: list[Any]) -> list[str]:
    """Each output as ``stdout: text`` or the sorted MIME types of a display output."""
    found = []
    for output in outputs:
        if output.output_type == "stream":
            found.append(f"{output.name}: {output.text.splitlines()[0]}")
        else:
            found.append(f"{output.output_type}: {', '.join(sorted(output.data))}")
    return found


@pytest.mark.parametrize("path", ["in-process", "REST"])
def test_a_figure_is_saved_in_the_notebook_in_order_with_the_text(
    path: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    require_matplotlib()
    nb = run_on_server(request.getfixturevalue("live")) if path == "REST" else run_alone(tmp_path)
    outputs = nb.cells[1].outputs
    print("\n".join(shapes(outputs)))
    assert shapes(outputs)[:4] == [
        "stdout: before the figure",
        "display_data: image/png, text/plain",
        "stdout: after the figure",
        "display_data: text/html, text/plain",
    ]
    # The figure still open at exit comes last, before the footer line.
    assert shapes(outputs)[4] == "display_data: image/png, text/plain"
    launched_by = LAUNCHERS[path]
    assert outputs[-1].text.startswith("[sandbox] subprocess · exit 0")
    assert outputs[-1].text.rstrip().endswith(f"launched by {launched_by}")
    assert len(outputs) == 6
    assert_red_figure(base64.b64decode(outputs[1].data["image/png"]))
    assert base64.b64decode(outputs[4].data["image/png"]).startswith(b"\x89PNG")
    # The cell is trusted in the lab: its HTML was cleaned before it was published.
    html = outputs[3].data["text/html"]
    assert "<td" in html and "42" in html and "<script" not in html and "alert" not in html


def test_the_envelope_keeps_the_outputs_in_the_out_variable(tmp_path: Path) -> None:
    require_matplotlib()
    nb = notebook("local")
    nb.cells[1].source = nb.cells[1].source.replace("%%sandbox", "%%sandbox --out r")
    nb.cells.append(
        nbformat.v4.new_code_cell(
            "import json\nprint(json.dumps([sorted(o['data']) for o in r['outputs']]))", id="env"
        )
    )
    NotebookClient(nb, timeout=CELL_TIMEOUT_SEC, kernel_name="python3").execute()
    printed = json.loads(nb.cells[2].outputs[0].text)
    assert printed == [
        ["image/png", "text/plain"],
        ["text/html", "text/plain"],
        ["image/png", "text/plain"],
    ]


def test_a_server_answering_the_whole_envelope_is_shown_in_the_same_order() -> None:
    """A server that does not stream (plain JSON): stdout is cut where each output came."""
    item = {"output_type": "display_data", "data": {"text/plain": "fig"}, "metadata": {}}
    envelope = {
        "backend": "subprocess",
        "language": "python",
        "command": ["python", "inline.py"],
        "exit_code": 0,
        "stdout": "é1\n2\n",
        "stderr": "warn\n",
        "outputs": [{**item, "stdout_at": 3}, {**item, "stdout_at": 5}],
    }
    body = json.dumps(envelope).encode()

    class Whole(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Whole)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    seen: list[tuple[str, str]] = []

    async def collect(stream: str, text: str) -> None:
        seen.append((stream, text if stream != rich.DISPLAY_STREAM else "<display>"))

    try:
        client = RestClient(f"http://127.0.0.1:{server.server_address[1]}/", "")
        result = run_sync(client.run("token", on_output=collect))
    finally:
        server.shutdown()
        server.server_close()
    assert len(result.outputs) == 2
    assert seen == [
        ("stdout", "é1\n"),
        ("display", "<display>"),
        ("stdout", "2\n"),
        ("display", "<display>"),
        ("stderr", "warn\n"),
    ]
