"""``jupyter sandbox run --input PATH``: real CLI processes in a folder of data."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.inputs import make_project, untouched

from .test_cli import cli

READ = (
    "import csv, os\n"
    "print(sum(int(r['sales']) for r in csv.DictReader(open('sales.csv'))))\n"
    "print(sorted(os.listdir('data')))\n"
)


def test_run_hands_the_snippet_a_file_and_a_folder(tmp_path: Path) -> None:
    here = make_project(tmp_path)
    ran = cli(
        "run", "python", "-c", READ, "--input", "sales.csv", "--input", "data", "--yes", cwd=here
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "42\n['notes.txt']\n"
    assert untouched(here)


def test_plan_lists_each_input_and_the_caps(tmp_path: Path) -> None:
    here = make_project(tmp_path)
    shown = cli("plan", "python", "-c", READ, "--input", "sales.csv", "--input", "data", cwd=here)
    assert shown.returncode == 0, shown.stderr
    assert "input sales.csv · 31 B · sha256:" in shown.stdout
    assert "input data/ (1 file) · 27 B · sha256:" in shown.stdout
    assert "at most 100 MB and 1000 files in all" in shown.stdout
    as_json = cli("plan", "python", "-c", READ, "--input", "sales.csv", "--json", cwd=here)
    (only,) = json.loads(as_json.stdout)["inputs"]
    assert (only["name"], only["size"]) == ("sales.csv", 31)


def test_a_symlink_out_of_the_folder_is_refused_by_name(tmp_path: Path) -> None:
    here = make_project(tmp_path / "project")
    secret = tmp_path / "secret.txt"
    secret.write_text("no\n")
    os.symlink(secret, here / "data" / "leak.txt")
    ran = cli("run", "python", "-c", READ, "--input", "data", "--yes", cwd=here)
    assert ran.returncode == 2 and ran.stdout == ""
    assert "data/leak.txt" in ran.stderr and "outside" in ran.stderr
