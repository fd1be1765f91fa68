"""A session's cells take files in and hand files out, as a run does: real kernels in the
real sandbox (bubblewrap), inputs as approved and read-only, out/ by a run's rules."""

from __future__ import annotations

import dataclasses
import os
from functools import partial
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.errors import ApprovalError, InputRefused
from gitpilot_jupyter.sandbox.inputs import InputCaps, resolve_inputs
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.outfiles import OutCaps
from gitpilot_jupyter.sandbox.sessions import SessionManager
from tests.support.inputs import NOTES, READ_BOTH, READ_BOTH_OUT, make_project, untouched

from .sessionkit import cell, start_request, with_sessions


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


def _out(tmp_path: Path, n: int) -> Path:
    folder = tmp_path / f"out-{n}"
    folder.mkdir()
    return folder


def test_a_cells_inputs_are_read_only_and_stay_for_later_cells(
    bwrap: SubprocessSandbox, project: Path
) -> None:
    inputs = resolve_inputs(project, ["sales.csv", "data"], caps=InputCaps())

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        spec = dataclasses.replace(cell("nb", READ_BOTH), inputs=inputs)
        first = await manager.run_cell(spec, user=None)
        assert first.result.exit_code == 0, first.result.stderr
        assert first.result.stdout == READ_BOTH_OUT
        # Read-only where the session sees them; a later cell (no inputs) still reads them.
        tries = (
            "import os\n"
            "for path in ('sales.csv', 'data/notes.txt', 'data/new.txt'):\n"
            "    try:\n"
            "        open(path, 'a').write('changed')\n"
            "        print(path, 'written')\n"
            "    except OSError as exc:\n"
            "        print(path, 'refused', exc.errno)\n"
            "print(open('data/notes.txt').read(), end='')\n"
        )
        later = await manager.run_cell(cell("nb", tries), user=None)
        lines = later.result.stdout.splitlines()
        assert all(" refused " in line for line in lines[:3]), (lines, later.result.stderr)
        assert lines[2] == "data/new.txt refused 30"  # EROFS: the folder is bound read-only
        assert lines[3:] == [NOTES.strip()]
        # A new version of an input replaces the old one under its name.
        (project / "sales.csv").write_text("region,sales\nwest,1\n")
        newer = resolve_inputs(project, ["sales.csv"], caps=InputCaps())
        again = await manager.run_cell(
            dataclasses.replace(
                cell("nb", "print(open('sales.csv').read(), end='')"), inputs=newer
            ),
            user=None,
        )
        assert again.result.stdout == "region,sales\nwest,1\n", again.result.stderr

    with_sessions(bwrap, body)
    assert (project / "data" / "notes.txt").read_text() == NOTES  # the originals: never written


def test_an_input_changed_after_its_approval_is_refused_before_the_cell_runs(
    bwrap: SubprocessSandbox, project: Path
) -> None:
    inputs = resolve_inputs(project, ["sales.csv"], caps=InputCaps())
    (project / "sales.csv").write_text("region,sales\nnorth,999\n")

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        spec = dataclasses.replace(cell("nb", "open('ran', 'w')"), inputs=inputs)
        with pytest.raises(ApprovalError) as refused:
            await manager.run_cell(spec, user=None)
        assert refused.value.code == "approval_mismatch"
        after = await manager.run_cell(
            cell("nb", "import os\nprint(os.path.exists('ran'), os.path.exists('sales.csv'))"),
            user=None,
        )
        assert after.result.stdout == "False False\n"

    with_sessions(bwrap, body)


def test_each_cell_hands_back_what_it_wrote_or_changed_under_out(
    bwrap: SubprocessSandbox, tmp_path: Path
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        write = "import os\nos.makedirs('out/plots', exist_ok=True)\n"
        first = await manager.run_cell(
            cell(
                "nb",
                write + "open('out/a.txt', 'w').write('a')\n"
                "open('out/plots/b.txt', 'w').write('bb')",
            ),
            user=None,
            out_folder=partial(_out, tmp_path, 1),
        )
        assert first.result.exit_code == 0, first.result.stderr
        assert sorted((f["name"], f["size"]) for f in first.result.files) == [
            ("a.txt", 1),
            ("plots/b.txt", 2),
        ]
        # Nothing written: nothing listed; one file changed: that one only.
        quiet = await manager.run_cell(
            cell("nb", "x = 1"), user=None, out_folder=partial(_out, tmp_path, 2)
        )
        assert quiet.result.files == []
        changed = await manager.run_cell(
            cell("nb", "open('out/a.txt', 'w').write('again')"),
            user=None,
            out_folder=partial(_out, tmp_path, 3),
        )
        assert [(f["name"], f["size"]) for f in changed.result.files] == [("a.txt", 5)]
        assert (tmp_path / "out-3" / "000000").read_bytes() == b"again"

    with_sessions(bwrap, body)


def test_out_keeps_a_runs_rules_no_symlink_no_fifo_and_the_caps(
    bwrap: SubprocessSandbox, tmp_path: Path
) -> None:
    hostile = (
        "import os\n"
        "os.symlink('/etc/shadow', 'out/shadow')\n"
        "os.symlink('/etc', 'out/etc')\n"
        "os.mkfifo('out/pipe')\n"
        "open('out/kept.txt', 'w').write('kept')\n"
    )
    many = "for i in range(5):\n    open(f'out/f{i}.txt', 'w').write('x' * 10)\n"
    caps = OutCaps(max_files=3, max_bytes=1000)

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        outcome = await manager.run_cell(
            cell("nb", hostile), user=None, out_folder=partial(_out, tmp_path, 1), out_caps=caps
        )
        result = outcome.result
        assert result.exit_code == 0, result.stderr
        assert [f["name"] for f in result.files] == ["kept.txt"]
        notes = " ".join(result.notes)
        assert "out/shadow" in notes and "symlink" in notes and "FIFO" in notes, notes
        assert [p.read_bytes() for p in (tmp_path / "out-1").iterdir()] == [b"kept"]
        # The cap on files holds per cell; those left out come with a later cell.
        capped = await manager.run_cell(
            cell("nb", many), user=None, out_folder=partial(_out, tmp_path, 2), out_caps=caps
        )
        assert len(capped.result.files) == 3
        assert "cap of 3 files" in " ".join(capped.result.notes)
        rest = await manager.run_cell(
            cell("nb", "pass"), user=None, out_folder=partial(_out, tmp_path, 3), out_caps=caps
        )
        assert len(rest.result.files) == 2

    with_sessions(bwrap, body)


def test_the_inbox_goes_with_the_session(bwrap: SubprocessSandbox, project: Path) -> None:
    inputs = resolve_inputs(project, ["sales.csv"], caps=InputCaps())
    inboxes: list[Path] = []

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        spec = dataclasses.replace(
            cell("nb", "print(open('sales.csv').read(), end='')"), inputs=inputs
        )
        done = await manager.run_cell(spec, user=None)
        assert done.result.exit_code == 0, done.result.stderr
        inboxes.append(manager._sessions[(None, "nb")].kernel.files.private)
        assert any(inboxes[0].rglob("sales.csv"))
        await manager.stop("nb", user=None)
        assert not inboxes[0].exists()

    with_sessions(bwrap, body)
    assert untouched(project)


def test_an_input_whose_name_is_a_folder_of_the_session_is_refused(
    bwrap: SubprocessSandbox, project: Path
) -> None:
    inputs = resolve_inputs(project, ["sales.csv"], caps=InputCaps())

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        await manager.run_cell(cell("nb", "import os\nos.mkdir('sales.csv')"), user=None)
        spec = dataclasses.replace(cell("nb", "open('ran', 'w')"), inputs=inputs)
        with pytest.raises(InputRefused, match=r"has a folder 'sales\.csv'"):
            await manager.run_cell(spec, user=None)
        after = await manager.run_cell(
            cell("nb", "import os\nprint(os.path.isdir('sales.csv'), os.path.exists('ran'))"),
            user=None,
        )
        assert after.result.stdout == "True False\n", after.result.stderr
        assert len(os.listdir(manager._sessions[(None, "nb")].kernel.files.inbox)) == 0

    with_sessions(bwrap, body)
