"""A run's inputs in its folder: bound read-only (bubblewrap) or moved in (the other engines).

The service hands each run the copies it verified against the plan
(:func:`~gitpilot_jupyter.sandbox.inputs.stage_inputs`), never the originals: an
engine that can mount binds each copy read-only at ``./NAME`` (:func:`input_binds`);
the namespace-free engine and ``off`` move the copies into the run folder
(:func:`move_inputs`), where a run as the server's user could change them, but only
them: the originals are never written.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..inputs import StagedInput


def move_inputs(inputs: Sequence[StagedInput], workdir: Path) -> None:
    """Put each staged copy at ``workdir/NAME`` (a rename: both are in the temp dir)."""
    for one in inputs:
        target = workdir / one.name
        try:
            os.rename(one.path, target)
        except OSError:  # another file system after all: copy, modes kept (read-only)
            if one.kind == "dir":
                shutil.copytree(one.path, target, symlinks=True)
            else:
                shutil.copy2(one.path, target)


def input_binds(
    inputs: Sequence[StagedInput], seen_in: Path, workdir: Path
) -> list[tuple[str, str, str]]:
    """bubblewrap's read-only binds of the staged copies, seen in the folder ``seen_in``
    (their folder bound into the run's stage), at ``workdir/NAME``."""
    return [("--ro-bind", str(seen_in / one.name), str(workdir / one.name)) for one in inputs]
