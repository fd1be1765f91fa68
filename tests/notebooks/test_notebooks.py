"""Every notebook in notebooks/ runs top to bottom in a real kernel, and says what it should.

Cells are found by their ids. Notebooks are stored without outputs; they run in
a copy inside a temp folder, with the private settings folder of the test.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.support.live_server import LiveServer, start_live_server
from tests.support.system import require_system

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT_SEC = 120


def execute(name: str, workdir: Path) -> dict[str, Any]:
    """Run ``notebooks/<name>`` in the venv's python3 kernel; return its cells by id."""
    path = workdir / name
    shutil.copy(NOTEBOOKS / name, path)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_SEC,
        kernel_name="python3",
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()
    return {cell.id: cell for cell in nb.cells}


def text(cell: Any, name: str = "stdout") -> str:
    """The text a cell printed on one stream (``error`` gives the one-line error)."""
    parts: list[str] = []
    for output in cell.outputs:
        if name == "error" and output.output_type == "error":
            parts.append("\n".join(output.traceback))
        elif output.output_type == "stream" and output.name == name:
            parts.append(output.text)
        elif name == "result" and output.output_type == "execute_result":
            parts.append(output.data.get("text/plain", ""))
    return "".join(parts)


def widget_shown(cell: Any) -> bool:
    return any(
        "application/vnd.jupyter.widget-view+json" in output.get("data", {})
        for output in cell.outputs
    )


def test_stored_without_outputs() -> None:
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name


def test_01_getting_started(tmp_path: Path) -> None:
    require_system("node", shutil.which("node") is not None, "notebook 1 says hello in JavaScript")
    cells = execute("01-getting-started.ipynb", tmp_path)
    assert "backend          subprocess  (ok)" in text(cells["status"])
    python = text(cells["hello-python"])
    assert python.startswith("Hello from Python 3.") and "6 x 7 = 42" in python
    assert "[sandbox] subprocess · exit 0" in python
    assert text(cells["hello-javascript"]).startswith("Hello from JavaScript\n")
    bash = text(cells["hello-bash"])
    assert bash.startswith("Hello from bash\nI run in /") and str(tmp_path) not in bash
    assert "visible in the kernel? False" in text(cells["not-here"])
    plan = text(cells["plan"])
    assert "language: python | backend: subprocess" in plan
    assert "warning high - os.system" in plan
    assert widget_shown(cells["card"]) and text(cells["card"]) == ""  # waits for a click
    assert text(cells["yes"]).startswith("approved up front")
    error = text(cells["fails"], "error")
    assert error == "SandboxRunError: the python snippet exited with code 1"
    assert "IndexError: list index out of range" in text(cells["fails"], "stderr")
    envelope = text(cells["envelope"])
    assert "exit code : 1" in envelope
    assert "last line : IndexError: list index out of range" in envelope
    assert "UsageError: sandbox: unknown language 'cobol'" in text(cells["bad-language"], "stderr")
    assert "code='unknown_language' status=400" in text(cells["typed-error"])
    assert "'exit_code': 1" in text(cells["last"], "result")


def test_02_teaching_safely(tmp_path: Path) -> None:
    cells = execute("02-teaching-safely.ipynb", tmp_path)
    loop = text(cells["loop-result"])
    assert "timed out: True | exit code: -1" in loop
    assert "kept output: counting forever..." in loop
    assert "timed out" in text(cells["loop"]).splitlines()[-1]
    flood = text(cells["flood-result"])
    assert "truncated: True" in flood
    assert "kept 512,000 bytes of output" in flood
    assert "output truncated" in flood.splitlines()[-1]
    assert len(text(cells["flood"])) == 0  # the flood stayed out of the page
    asked = text(cells["input-fast"])
    assert "exit code 1 after" in asked and "EOFError" in asked
    assert int(asked.split(" after ")[1].split(" ms")[0]) < 10_000
    assert "Ada would be 210 in 2025" in text(cells["stdin-run"])
    secrets = text(cells["secrets-run"])
    assert "OPENAI_API_KEY       <not visible>" in secrets
    assert "GRADEBOOK_PASSWORD   <not visible>" in secrets
    assert "COURSE_NAME          Programming 101" in secrets
    assert "destructive pattern 'rm -rf /'" in text(cells["destructive"], "error")
    assert "cleaning up" not in text(cells["destructive"])
    assert "removed my own scratch folder" in text(cells["harmless"])
    grading = text(cells["grading"]).splitlines()
    assert grading == [
        "alice  output: 55",
        "bob    timed out",
        "carol  error: ZeroDivisionError: division by zero",
        "dave   output: None",
    ]


def test_03_matrixlab_against_the_runner_standin(
    tmp_path: Path,
    runner_standin: Any,
    monkeypatch: pytest.MonkeyPatch,
    sandbox_config_dir: Path,
) -> None:
    monkeypatch.setenv("DEMO_RUNNER_URL", runner_standin.url)
    monkeypatch.setenv("DEMO_RUNNER_TOKEN", runner_standin.token)
    cells = execute("03-matrixlab.ipynb", tmp_path)
    assert "backend          subprocess" in text(cells["status-before"])
    assert widget_shown(cells["panel"])
    assert text(cells["test"]).startswith("✓ connected")
    save = text(cells["save"])
    assert "Saved backend, matrixlab_token, matrixlab_url." in save
    assert "token field now empty: True | a token is saved: True" in save
    assert "backend          matrixlab  (ok)" in text(cells["status-after"])
    python = text(cells["run-python"])
    assert python.startswith("Hello from a MatrixLab container, linux")
    assert "[sandbox] matrixlab · exit 0" in python
    assert "[sandbox] matrixlab · exit 0" in text(cells["run-bash"])
    assert "[sandbox] subprocess · exit 0" in text(cells["run-local"])
    lifecycle = text(cells["lifecycle"])
    assert "install button disabled: True" in lifecycle
    assert "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1" in lifecycle
    assert "Runner answering: True" in lifecycle
    assert "Token cleared." in text(cells["restore"])
    assert "backend          subprocess" in text(cells["status-restored"])
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())["sandbox"]
    assert saved["backend"] == "subprocess" and "matrixlab_token" not in saved
    for cell in cells.values():  # the token never reached the notebook
        assert runner_standin.token not in json.dumps(cell.get("outputs", []))


@pytest.fixture
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = start_live_server(tmp_path_factory.mktemp("nb-server"))
    yield server
    server.stop()


def test_04_rest_api(
    tmp_path: Path, live_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Run headless, the kernel has no launching server: the notebook's documented fallback.
    monkeypatch.setenv("JUPYTER_SERVER_URL", live_server.url)
    monkeypatch.setenv("JUPYTER_TOKEN", live_server.token)
    cells = execute("04-rest-api.ipynb", tmp_path)
    assert f"talking to {live_server.url}" in text(cells["find"])
    assert "backend: subprocess | ok: True | approval required: True" in text(cells["status"])
    assert "blocked: False" in text(cells["plan"])
    refused = text(cells["refused"])
    assert refused.startswith("403") and '"code": "approval_required"' in refused
    assert "token expires in 300 s" in text(cells["approve"])
    assert text(cells["run"]).startswith("3.141592653589793 | exit 0")
    assert text(cells["replay"]).strip() == "403 approval_used"
    stream = [line.strip() for line in text(cells["stream"]).splitlines()]
    assert [line.split(" ", 1)[1] for line in stream[:3]] == [
        "stdout tick 0",
        "stdout tick 1",
        "stdout tick 2",
    ]
    assert "result: exit 0" in stream[3]
    first, last = float(stream[0].split("s ")[0]), float(stream[2].split("s ")[0])
    assert last - first >= 0.4  # the ticks arrived as they were printed
    errors = text(cells["errors"]).splitlines()
    assert errors[0].startswith("400 unknown_language")
    assert errors[1] == "200 blocked: True - destructive pattern 'rm -rf /'"
    assert errors[2].startswith("400 ")
    assert errors[3].startswith("400 unknown_field")
    config = text(cells["config"])
    assert "'has_token': False" in config and "timeout now 60" in config
    assert "400 unknown sandbox backend 'docker'" in config


def test_03_without_a_runner_says_why_and_still_ends_local(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sandbox_config_dir: Path
) -> None:
    monkeypatch.setenv("DEMO_RUNNER_URL", "http://127.0.0.1:9")
    cells = execute("03-matrixlab.ipynb", tmp_path)
    verdict = text(cells["test"])
    assert verdict.startswith("✗ not usable") and "—" in verdict  # with a hint
    assert "backend_unreachable" in text(cells["run-python"], "stderr")
    assert "[sandbox] subprocess · exit 0" in text(cells["run-local"])
    assert "backend          subprocess" in text(cells["status-restored"])
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())["sandbox"]
    assert saved["backend"] == "subprocess"
