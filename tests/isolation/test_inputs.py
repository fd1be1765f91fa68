"""A run's inputs on each engine: the snippet reads them at ``./NAME``; bubblewrap shows
them read-only, the other engines a copy; the originals never change."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.inputs import InputCaps, resolve_inputs, stage_inputs
from gitpilot_jupyter.sandbox.local.cleanup import make_run_dir, remove_tree
from gitpilot_jupyter.sandbox.results import RunResult
from tests.support.inputs import NOTES, make_project, untouched

from .conftest import SMALL, make_backend

#: Reads the CSV and the folder, then tries to change each (the outcome is printed).
SNIPPET = """
import csv, os
print(sum(int(r["sales"]) for r in csv.DictReader(open("sales.csv"))))
print(open("data/notes.txt").read().strip())
for path in ("sales.csv", "data/notes.txt", "data/new.txt"):
    try:
        with open(path, "a") as f:
            f.write("changed")
        print(path, "written")
    except OSError as exc:
        print(path, "refused", exc.errno)
"""


def run_with_inputs(mechanism: str, project: Path) -> RunResult:
    backend = make_backend(mechanism)
    found = resolve_inputs(project, ["sales.csv", "data"], caps=InputCaps())
    private = Path(make_run_dir())
    try:
        request = RunRequest(
            language="python",
            code=SNIPPET,
            timeout_sec=20,
            limits=SMALL,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            inputs=stage_inputs(found, private),
        )

        async def run() -> RunResult:
            try:
                return await backend.run(request)
            finally:
                await backend.aclose()

        return asyncio.run(run())
    finally:
        remove_tree(private)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def test_bubblewrap_shows_the_inputs_read_only(project: Path) -> None:
    result = run_with_inputs("bwrap", project)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["42", NOTES.strip()]
    # Writing fails: the files are bound read-only, and so is the folder.
    assert all(" refused " in line for line in lines[2:]), lines
    assert lines[4] == "data/new.txt refused 30"  # EROFS
    assert untouched(project)


@pytest.mark.parametrize("mechanism", ["landlock", "none"])
def test_the_other_engines_get_a_copy(mechanism: str, project: Path) -> None:
    result = run_with_inputs(mechanism, project)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines()[:2] == ["42", NOTES.strip()]
    assert untouched(project)  # whatever the run did to its copy
