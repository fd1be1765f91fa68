"""Every notebook in notebooks/ runs top to bottom, and says what it should, both ways a
user opens it:

* ``server``: launched from a real ``jupyter server`` with the extension, as
  ``make run`` / JupyterLab opens it: the server starts the kernel (a session for
  the notebook's path), so the magic finds the server that launched it and takes
  the REST path, and settings live in the server's settings folder;
* ``alone``: a kernel of its own (nbclient, ``jupyter nbconvert --execute``): the
  in-process path (notebook 04 is pointed at a server by its env fallback).

Cells are found by their ids. Notebooks are stored without outputs; they run in
a copy inside a temp folder, with a private settings folder, and with only what
``make run`` installs (``make_run_env``: no test tools, whatever this virtualenv holds).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from tests.notebooks.make_run_env import make_run_env
from tests.support.live_server import LiveServer, start_live_server
from tests.support.system import require_system

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT_SEC = 120
MODES = ("server", "alone")


class ServerKernel(AsyncKernelManager):  # type: ignore[misc]
    """A kernel the Jupyter server started (found by its connection file), as a tab has it."""

    def __init__(self, server: LiveServer, kernel_id: str, connection_file: Path) -> None:
        super().__init__(connection_file=str(connection_file))
        self.load_connection_file()
        self.server, self.kernel_id = server, kernel_id

    @property
    def has_kernel(self) -> bool:
        return True

    async def _async_is_alive(self) -> bool:
        return True

    is_alive = _async_is_alive

    async def _async_interrupt_kernel(self) -> None:
        with self.server.client() as http:
            http.post(f"/api/kernels/{self.kernel_id}/interrupt")

    interrupt_kernel = _async_interrupt_kernel


@dataclass
class Opened:
    """Where a notebook ran: its folder, the settings folder it used, the server if any."""

    workdir: Path
    config_dir: Path
    server: LiveServer | None


def execute_alone(name: str, workdir: Path) -> dict[str, Any]:
    """Run ``notebooks/<name>`` in a kernel of its own (the venv's python3)."""
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


#: Other suites run a notebook alone with this name (tests/batch runs notebook 05).
execute = execute_alone


def execute_on_server(name: str, server: LiveServer) -> dict[str, Any]:
    """Open ``notebooks/<name>`` on ``server`` as JupyterLab does and run every cell."""
    shutil.copy(NOTEBOOKS / name, server.root_dir / name)
    nb = nbformat.read(server.root_dir / name, as_version=4)
    execute_in_session(nb, name, server)
    return {cell.id: cell for cell in nb.cells}


def execute_in_session(nb: nbformat.NotebookNode, name: str, server: LiveServer) -> None:
    """Run every cell of ``nb`` in the kernel of a session ``server`` opens for ``name``."""
    body = {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    with server.client() as http:
        session = http.post("/api/sessions", json=body)
        assert session.status_code == 201, session.text
        kernel_id = session.json()["kernel"]["id"]
    runtime = Path(server.env["JUPYTER_RUNTIME_DIR"])
    km = ServerKernel(server, kernel_id, runtime / f"kernel-{kernel_id}.json")
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_SEC, kernel_name="python3")
    try:
        client.execute()
    finally:
        if client.kc is not None:
            client.kc.stop_channels()
        with server.client() as http:
            http.delete(f"/api/sessions/{session.json()['id']}")


#: Each notebook runs twice in the same folder, as a user's second Run All does.
RUNS = 2


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """How the notebook is opened: launched from a server, or alone."""
    return str(request.param)


@pytest.fixture
def opener(
    mode: str,
    tmp_path_factory: pytest.TempPathFactory,
    sandbox_config_dir: Path,
) -> Iterator[Any]:
    """``open(name, env={...})`` runs a notebook in this test's mode; ``.where`` says where.

    ``times`` (:data:`RUNS` by default) runs it again in the same folder (a second Run All:
    the files the first one wrote are there), answering the last run's cells (``.runs`` holds
    every run's).
    The kernel, and the server when there is one, have only what ``make run`` installs
    (``make_run=False``: this whole test virtualenv), as a newcomer's do.
    """
    servers: list[LiveServer] = []

    class Open:
        where: Opened
        runs: list[dict[str, Any]]

        def __call__(
            self,
            name: str,
            env: Mapping[str, str] | None = None,
            *,
            times: int = RUNS,
            make_run: bool = True,
        ) -> dict[str, Any]:
            env = dict(env or {})
            if make_run:
                env.update(make_run_env(tmp_path_factory.mktemp("make-run-env")))
            self.runs = []
            if mode == "alone":
                workdir = tmp_path_factory.mktemp("nb-alone")
                before = {key: os.environ.get(key) for key in env}
                os.environ.update(env)
                try:
                    for _ in range(times):
                        self.runs.append(execute_alone(name, workdir))
                finally:
                    for key, value in before.items():
                        if value is None:
                            os.environ.pop(key, None)
                        else:
                            os.environ[key] = value
                self.where = Opened(workdir, sandbox_config_dir, None)
                return self.runs[-1]
            venv_kernels = {"JUPYTER_PATH": os.path.join(sys.prefix, "share", "jupyter")}
            server = start_live_server(
                tmp_path_factory.mktemp("nb-server"), env={**venv_kernels, **env}
            )
            servers.append(server)
            self.where = Opened(server.root_dir, server.config_dir, server)
            for _ in range(times):
                self.runs.append(execute_on_server(name, server))
            return self.runs[-1]

    yield Open()
    for server in servers:
        server.stop()


def saved_settings(config_dir: Path) -> dict[str, Any]:
    """The sandbox settings written to ``config_dir`` ({} when nothing was saved)."""
    path = config_dir / "settings.json"
    return json.loads(path.read_text())["sandbox"] if path.exists() else {}


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


#: What a notebook's metadata holds once JupyterLab opened it with the python3 kernel: stored so,
#: opening a demo notebook changes nothing and it does not show as modified.
LAB_METADATA = {
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
    },
}


def test_stored_clean() -> None:
    """No outputs, no execution counts, no metadata noise; written as Jupyter writes it."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        raw = path.read_text(encoding="utf-8")
        nb = nbformat.reads(raw, as_version=4)
        nbformat.validate(nb)
        assert raw == nbformat.writes(nb) + "\n", f"{path.name}: not in Jupyter's own format"
        assert (nb.nbformat, nb.nbformat_minor) == (4, 5), path.name
        language_info = dict(nb.metadata.get("language_info", {}))
        language_info.pop("version", None)  # the Python the kernel runs; Lab writes it too
        assert {**nb.metadata, "language_info": language_info} == LAB_METADATA, path.name
        for cell in nb.cells:
            assert set(cell.metadata) <= {"tags"}, f"{path.name} {cell.id}: {dict(cell.metadata)}"
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None, path.name


def test_01_getting_started(opener: Any, mode: str) -> None:
    require_system("node", shutil.which("node") is not None, "notebook 1 says hello in JavaScript")
    cells = opener("01-getting-started.ipynb")
    status = text(cells["status"])
    assert "backend          subprocess  (ok)" in status
    launcher = "the Jupyter server" if mode == "server" else "this kernel"
    assert status.splitlines()[-1] == f"launched by      {launcher}"
    python = text(cells["hello-python"])
    assert python.startswith("Hello from Python 3.") and "6 x 7 = 42" in python
    assert "[sandbox] subprocess · exit 0" in python
    assert text(cells["hello-javascript"]).startswith("Hello from JavaScript\n")
    bash = text(cells["hello-bash"])
    assert bash.startswith("Hello from bash\nI run in /") and str(opener.where.workdir) not in bash
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


def test_02_teaching_safely(opener: Any, mode: str) -> None:
    cells = opener("02-teaching-safely.ipynb")
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
    # Where the snippet's environment comes from: the server's or this kernel's.
    launcher = "the Jupyter server" if mode == "server" else "this kernel"
    assert f"launched by      {launcher}" in text(cells["secrets"])
    secrets = text(cells["secrets-run"])
    assert "OPENAI_API_KEY       <not visible>" in secrets
    assert "GRADEBOOK_PASSWORD   <not visible>" in secrets
    assert "COURSE_NAME          <not visible>" in secrets  # not passed: not there, either way
    assert "secret-looking variables the snippet sees: []" in secrets
    assert "COURSE_NAME = Programming 101" in text(cells["pass-run"])  # passed on purpose
    assert "destructive pattern 'rm -rf /'" in text(cells["destructive"], "error")
    assert "cleaning up" not in text(cells["destructive"])
    assert "removed my own scratch folder" in text(cells["harmless"])
    chart = cells["chart"].outputs
    figures = [o for o in chart if o.output_type == "display_data" and "image/png" in o.data]
    assert len(figures) == 1, [o.output_type for o in chart]  # saved in the notebook
    assert base64.b64decode(figures[0].data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")
    assert chart.index(figures[0]) == 0  # drawn before the line printed after it
    assert text(cells["chart"]).startswith("best week: 6\n")
    # A file handed in with --input, a chart written to out/ and saved with --output-dir.
    data_run = cells["data-run"]
    assert "6 weeks read, mean score 67.0" in text(data_run)
    saved = [line for line in text(data_run).splitlines() if line.startswith("[file out/")]
    assert len(saved) == 1 and "chart-out" in saved[0] and saved[0].endswith("scores.png]")
    shown = [o for o in data_run.outputs if o.output_type == "display_data"]
    assert len(shown) == 1  # the saved image, shown in the cell
    assert base64.b64decode(shown[0].data["image/png"]).startswith(b"\x89PNG\r\n\x1a\n")
    grading = text(cells["grading"]).splitlines()
    assert grading == [
        "alice  output: 55",
        "bob    timed out",
        "carol  error: ZeroDivisionError: division by zero",
        "dave   output: None",
    ]


def test_03_matrixlab_against_the_runner_standin(opener: Any, runner_standin: Any) -> None:
    env = {"DEMO_RUNNER_URL": runner_standin.url, "DEMO_RUNNER_TOKEN": runner_standin.token}
    cells = opener("03-matrixlab.ipynb", env=env)
    assert "backend          subprocess" in text(cells["status-before"])
    assert widget_shown(cells["panel"])
    assert text(cells["test"]).startswith("✓ connected")
    assert "Saved backend, matrixlab_token, matrixlab_url." in text(opener.runs[0]["save"])
    # The second Run All: the first one left the URL saved, and only changes are written.
    save = text(cells["save"])
    assert "Saved backend, matrixlab_token." in save
    assert "token field now empty: True | a token is saved: True" in save
    assert "backend          matrixlab  (ok)" in text(cells["status-after"])
    python = text(cells["run-python"])
    assert python.startswith("Hello from the sandbox, linux (the footer says which backend")
    assert "[sandbox] matrixlab · exit 0" in python
    assert "[sandbox] matrixlab · exit 0" in text(cells["run-bash"])
    assert "[sandbox] subprocess · exit 0" in text(cells["run-local"])
    lifecycle = text(cells["lifecycle"])
    assert "install button disabled: True" in lifecycle
    assert "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1" in lifecycle
    assert "Runner answering: True" in lifecycle
    assert "Token cleared." in text(cells["restore"])
    assert "backend          subprocess" in text(cells["status-restored"])
    saved = saved_settings(opener.where.config_dir)
    assert saved["backend"] == "subprocess" and "matrixlab_token" not in saved
    for cell in cells.values():  # the token never reached the notebook
        assert runner_standin.token not in json.dumps(cell.get("outputs", []))


def test_04_rest_api(opener: Any, mode: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    env: dict[str, str] = {}
    alone_server: LiveServer | None = None
    if mode == "alone":
        # A kernel of its own has no launching server: the notebook's documented fallback.
        alone_server = start_live_server(tmp_path_factory.mktemp("nb-04-server"))
        env = {"JUPYTER_SERVER_URL": alone_server.url, "JUPYTER_TOKEN": alone_server.token}
    try:
        cells = opener("04-rest-api.ipynb", env=env)
    finally:
        if alone_server is not None:
            alone_server.stop()
    server = alone_server or opener.where.server
    assert f"talking to {server.url}" in text(cells["find"])
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
    assert "'has_token': False" in config and "settings unchanged: True" in config
    assert "400 unknown sandbox backend 'docker'" in config
    # The user's settings file is as it was: nothing written (the config dir is fresh).
    assert saved_settings(server.config_dir) == {}


def test_03_without_a_runner_explains_and_leaves_the_settings(opener: Any) -> None:
    # A fresh setup: nothing answers at the Runner URL.
    cells = opener("03-matrixlab.ipynb", env={"DEMO_RUNNER_URL": "http://127.0.0.1:9"})
    verdict = text(cells["test"])
    assert verdict.startswith("✗ not usable") and "—" in verdict  # with a hint
    save = text(cells["save"])
    assert "was not reachable when you tested it" in save
    assert "Not saved: the settings are as they were." in save
    assert "backend          subprocess" in text(cells["status-after"])
    # The cells meant for the Runner run locally: no outage error, no UsageError.
    python = text(cells["run-python"])
    assert "[sandbox] subprocess · exit 0" in python and "MatrixLab" not in python
    assert "[sandbox] subprocess · exit 0" in text(cells["run-local"])
    code = [cell for cell in cells.values() if cell.cell_type == "code"]
    assert not [cell.id for cell in code if text(cell, "error")]
    assert all("UsageError" not in text(cell, "stderr") for cell in code)
    assert "backend          subprocess" in text(cells["status-restored"])
    assert saved_settings(opener.where.config_dir).get("backend", "subprocess") == "subprocess"
