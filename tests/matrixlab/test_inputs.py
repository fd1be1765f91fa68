"""Inputs on the ``matrixlab`` backend: their copies go in the run's zip workspace."""

from __future__ import annotations

from pathlib import Path

from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.support.inputs import CSV, NOTES, READ_BOTH, READ_BOTH_OUT, make_project
from tests.support.standin_fixture import StandinRunner

from .conftest import sent_requests
from .test_backend import workspace_files


async def test_a_snippet_reads_its_inputs_from_the_workspace(
    matrixlab_service: SandboxService, runner_standin: StandinRunner, tmp_path: Path
) -> None:
    make_project(tmp_path)
    options = RunOptions(
        language="python", code=READ_BOTH, backend="matrixlab", inputs=("sales.csv", "data")
    )
    planned = await matrixlab_service.plan_and_run(options, confirmed=True)
    assert planned.result is not None, planned.plan.checks
    assert (planned.result.exit_code, planned.result.stdout) == (0, READ_BOTH_OUT)
    sent = sent_requests(runner_standin)[-1]
    assert sent["path"] == "/run"
    files = workspace_files(sent["body"])
    assert files["sales.csv"] == CSV and files["data/notes.txt"] == NOTES
    labels = [c["label"] for c in planned.plan.checks]
    assert any("copies the run may change" in label for label in labels)
