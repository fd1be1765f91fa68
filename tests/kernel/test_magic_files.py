"""``%%sandbox``: the files a cell's run leaves under ``out/`` saved beside the notebook.

A real InteractiveShell: the cell writes ``out/chart.csv`` and ``out/plot.png``; both are
saved into ``sandbox-out/<run_id>/`` of the kernel's folder (or ``--output-dir``), the cell
says where, and the PNG is shown in the cell too. An existing file stays without
``--force``.
"""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any, cast

import pytest
from IPython.core.interactiveshell import InteractiveShell

from gitpilot_jupyter.client.base import SandboxClient
from gitpilot_jupyter.kernel import outfiles
from gitpilot_jupyter.kernel.magics import SandboxMagics
from gitpilot_jupyter.sandbox.outfiles import OutFile
from gitpilot_jupyter.sandbox.results import RunResult
from tests.support.cards import approve

#: The smallest valid PNG (1x1, transparent).
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
CELL = f"open('out/chart.csv', 'w').write('a,b\\n')\n_ = open('out/plot.png', 'wb').write({PNG!r})"


@pytest.fixture
def notebook_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def shown(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    published: list[dict[str, Any]] = []
    monkeypatch.setattr(
        outfiles, "publish_display_data", lambda data, metadata: published.append(data)
    )
    return published


def test_out_files_are_saved_beside_the_notebook_and_an_image_shown(
    shell: InteractiveShell,
    notebook_folder: Path,
    shown: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    shell.run_cell_magic("sandbox", "--out r", CELL)
    out = capsys.readouterr().out
    saved = dict(re.findall(r"\[file out/(\S+): (\S+)\]", out))
    assert set(saved) == {"chart.csv", "plot.png"}, out
    run_id = shell.user_ns["r"]["run_id"]
    folder = notebook_folder / "sandbox-out" / run_id
    assert Path(saved["chart.csv"]) == folder / "chart.csv"
    assert (folder / "chart.csv").read_text() == "a,b\n"
    assert (folder / "plot.png").read_bytes() == PNG
    assert shown == [{"image/png": base64.b64encode(PNG).decode()}]


def test_an_existing_file_stays_without_force(
    shell: InteractiveShell,
    notebook_folder: Path,
    shown: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    target = notebook_folder / "results"
    target.mkdir()
    (target / "chart.csv").write_text("mine")
    shell.run_cell_magic("sandbox", f"--output-dir {target}", CELL)
    captured = capsys.readouterr()
    assert "already exists (--force replaces it)" in captured.err
    assert (target / "chart.csv").read_text() == "mine"
    assert (target / "plot.png").read_bytes() == PNG
    shell.run_cell_magic("sandbox", f"--output-dir {target} --force", CELL)
    assert (target / "chart.csv").read_text() == "a,b\n"
    assert not (notebook_folder / "sandbox-out").exists()


def test_an_image_past_the_display_caps_is_saved_and_not_shown(
    shell: InteractiveShell,
    notebook_folder: Path,
    shown: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # 7 MiB of PNG is over 8 MB once base64 (max_display_item_mb): saved, not inline.
    big = "open('out/big.png', 'wb').write(b'\\x89PNG\\r\\n\\x1a\\n' + bytes(7 * 1024 * 1024))\n"
    shell.run_cell_magic("sandbox", "--out r", big + CELL)
    captured = capsys.readouterr()
    folder = notebook_folder / "sandbox-out" / shell.user_ns["r"]["run_id"]
    assert (folder / "big.png").stat().st_size == 7 * 1024 * 1024 + 8
    assert (
        "sandbox: out/big.png saved, not shown: larger than 8 MB (max_display_item_mb)"
        in captured.err
    )
    assert shown == [{"image/png": base64.b64encode(PNG).decode()}]  # the small one only


#: What a hostile (or broken) server may list as a run's out/ files.
HOSTILE_NAMES = ["../escape.txt", "/tmp/absolute.txt", "a/../../b.txt", "./dot.txt", "fine.txt"]


class _ListingServer:
    """A client whose server lists any names it likes and hands bytes for each."""

    async def run_file(self, run_id: str, name: str) -> bytes:
        return f"written as {name}".encode()


def test_names_a_server_gives_never_lead_outside_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Names with ``../`` (the issue's hostile outputs): each is refused with a sentence,
    nothing is written outside the cell's folder, the plain name is saved."""
    folder = tmp_path / "nb" / "sandbox-out" / "run_x"
    files: list[OutFile] = [{"name": n, "size": 1, "sha256": "sha256:0"} for n in HOSTILE_NAMES]
    result = RunResult("subprocess", "python", [], 0, run_id="run_x", files=files)
    client = cast(SandboxClient, _ListingServer())
    refused = outfiles.save_run_files(client, result, folder)
    assert len(refused) == 4 and all("not saved" in r for r in refused), refused
    assert [p.relative_to(tmp_path) for p in sorted(tmp_path.rglob("*")) if p.is_file()] == [
        Path("nb/sandbox-out/run_x/fine.txt")
    ]
    assert not Path("/tmp/absolute.txt").exists()
    assert "[file out/fine.txt:" in capsys.readouterr().out


def test_a_cell_approved_on_its_card_saves_its_files_too(
    shell: InteractiveShell,
    magics: SandboxMagics,
    notebook_folder: Path,
    shown: list[dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # `import subprocess` is a high warning: the card asks first, and the run is its click's.
    risky = f"import subprocess\n{CELL}"
    shell.run_cell_magic("sandbox", "--out r --output-dir saved", risky)
    assert not (notebook_folder / "saved").exists()  # nothing ran yet
    approve(magics.card)
    assert magics.card.state == "done"
    out = capsys.readouterr().out
    assert set(re.findall(r"\[file out/(\S+): ", out)) == {"chart.csv", "plot.png"}, out
    assert (notebook_folder / "saved" / "chart.csv").read_text() == "a,b\n"
    assert (notebook_folder / "saved" / "plot.png").read_bytes() == PNG
    assert [data for data in shown if "image/png" in data]  # and the image is shown
