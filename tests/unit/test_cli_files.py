"""``jupyter sandbox run``: the files a snippet leaves under ``out/`` saved, their paths printed."""

from __future__ import annotations

import re
from pathlib import Path

from tests.unit.test_cli import cli

WRITE = (
    "import os\nos.makedirs('out/plots')\n"
    "open('out/chart.csv', 'w').write('month,sales\\n1,10\\n')\n"
    "open('out/plots/a.txt', 'w').write('a')\nprint('done')"
)


def test_out_files_are_saved_under_sandbox_out_and_their_paths_printed(tmp_path: Path) -> None:
    done = cli("run", "python", "-c", WRITE, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n"
    saved = dict(re.findall(r"\[file out/(\S+): (\S+)\]", done.stderr))
    assert set(saved) == {"chart.csv", "plots/a.txt"}, done.stderr
    assert re.fullmatch(r"sandbox-out/run_[0-9a-f]{16}/chart\.csv", saved["chart.csv"])
    assert (tmp_path / saved["chart.csv"]).read_text() == "month,sales\n1,10\n"
    assert (tmp_path / saved["plots/a.txt"]).read_text() == "a"


def test_an_existing_file_is_kept_without_force(tmp_path: Path) -> None:
    target = tmp_path / "results"
    target.mkdir()
    (target / "chart.csv").write_text("mine")
    kept = cli("run", "python", "-c", WRITE, "--yes", "--output-dir", str(target), cwd=tmp_path)
    assert kept.returncode == 1  # the snippet exited 0; a file could not be saved
    assert "already exists (--force replaces it)" in kept.stderr
    assert (target / "chart.csv").read_text() == "mine"
    assert (target / "plots" / "a.txt").read_text() == "a"  # the others are saved
    forced = cli(
        "run", "python", "-c", WRITE, "--yes", "--output-dir", str(target), "--force", cwd=tmp_path
    )
    assert forced.returncode == 0, forced.stderr
    assert (target / "chart.csv").read_text() == "month,sales\n1,10\n"
    assert not (tmp_path / "sandbox-out").exists()


def test_json_lists_the_files_and_saves_nothing(tmp_path: Path) -> None:
    done = cli("run", "python", "-c", WRITE, "--yes", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert '"name": "chart.csv"' in done.stdout
    assert not (tmp_path / "sandbox-out").exists()
