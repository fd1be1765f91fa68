"""``jupyter sandbox run``: a snippet's figures saved as files, their paths printed in order."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.figures import RED_FIGURE, assert_red_figure, require_matplotlib
from tests.unit.test_cli import cli

#: Text, the red figure, more text, a dict shown by display().
PLOT = f'print("before")\n{RED_FIGURE}print("after")\ndisplay({{"a": 1}})\n'


@pytest.fixture(autouse=True)
def _matplotlib() -> None:
    require_matplotlib()


def test_a_figure_is_saved_under_sandbox_out_and_its_path_printed(tmp_path: Path) -> None:
    done = cli("run", "python", "-c", PLOT, "--yes", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "before" and lines[2] == "after" and lines[3] == "{'a': 1}", lines
    shown = re.fullmatch(r"\[image 1: (sandbox-out/run_[0-9a-f]{16}/display-1\.png)\]", lines[1])
    assert shown, lines[1]
    assert_red_figure((tmp_path / shown.group(1)).read_bytes())
    assert [p.name for p in (tmp_path / "sandbox-out").iterdir()] == [
        Path(shown.group(1)).parent.name
    ]


def test_output_dir_is_never_overwritten_without_force(tmp_path: Path) -> None:
    target = tmp_path / "figures"
    first = cli("run", "python", "-c", PLOT, "--yes", "--output-dir", str(target), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "[image 1: figures/display-1.png]" in first.stdout
    (target / "display-1.png").write_bytes(b"mine")

    again = cli("run", "python", "-c", PLOT, "--yes", "--output-dir", str(target), cwd=tmp_path)
    assert again.returncode == 1  # the snippet exited 0; the image could not be saved
    assert "already exists (--force replaces it)" in again.stderr
    assert (target / "display-1.png").read_bytes() == b"mine"

    forced = cli(
        "run", "python", "-c", PLOT, "--yes", "--output-dir", str(target), "--force", cwd=tmp_path
    )
    assert forced.returncode == 0, forced.stderr
    assert_red_figure((target / "display-1.png").read_bytes())
    assert sorted(p.name for p in target.iterdir()) == ["display-1.png"]
    assert not (tmp_path / "sandbox-out").exists()


def test_json_prints_the_outputs_and_saves_nothing(tmp_path: Path) -> None:
    done = cli("run", "python", "-c", PLOT, "--yes", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    envelope = json.loads(done.stdout)
    assert [sorted(o["data"]) for o in envelope["outputs"]] == [
        ["image/png", "text/plain"],
        ["text/plain"],
    ]
    assert envelope["stdout"] == "before\nafter\n"
    assert not (tmp_path / "sandbox-out").exists()


def test_a_link_planted_in_output_dir_is_never_written_through(tmp_path: Path) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    target = tmp_path / "figures"
    target.mkdir()
    (target / "display-1.png").symlink_to(precious)
    for force in ((), ("--force",)):
        done = cli(
            "run", "python", "-c", PLOT, "--yes", "--output-dir", str(target), *force, cwd=tmp_path
        )
        assert done.returncode == 1, done.stderr
        assert "not saved:" in done.stderr and "display-1.png" in done.stderr
    assert precious.read_text() == "keep me"
    assert (target / "display-1.png").is_symlink()
