"""Zip a folder as a Runner workspace (``POST /run``), leaving out what never belongs in one.

Skipped: ``.git`` and other VCS folders, virtualenvs (any folder holding a
``pyvenv.cfg``), ``node_modules``, caches, ``dist``, ``build`` and every
symlink. The Runner refuses workspaces over 500 MiB; we refuse those over the
administrator's cap (``matrixlab_max_workspace_mb``, at most the Runner's) before
sending. The Runner's protocol takes the workspace as base64 inside a JSON body
(``/run`` and ``/workspaces/upload`` alike): the zip goes to a temporary file and
the body is streamed from it (:func:`request_content`), so the server holds a
chunk, never the workspace. The Runner itself holds the whole body.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import tempfile
import zipfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import InvalidRequest
from ..inputs import StagedInput
from .config import RUNNER_MAX_WORKSPACE_MB

MAX_WORKSPACE_BYTES = RUNNER_MAX_WORKSPACE_MB * 1024 * 1024
#: Bytes of the zip encoded per chunk of a streamed body (a multiple of 3: no padding inside).
CHUNK_BYTES = 3 * 256 * 1024
_PLACEHOLDER = "gitpilot-streamed-zip"

SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "env",
        "node_modules",
        "__pycache__",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ipynb_checkpoints",
        ".tox",
        ".nox",
        ".cache",
        "dist",
        "build",
    }
)


def _skip_dir(path: Path) -> bool:
    return path.name in SKIPPED_DIRS or path.is_symlink() or (path / "pyvenv.cfg").exists()


@dataclass
class StreamedZip:
    """A workspace zip in an unlinked temporary file, sent base64-encoded in chunks."""

    file: BinaryIO
    size: int

    def base64_size(self) -> int:
        """The length of its base64 text."""
        return 4 * ((self.size + 2) // 3)


def zip_workspace(
    folder: str | Path | None,
    max_bytes: int = MAX_WORKSPACE_BYTES,
    *,
    extra: Mapping[str, str] | None = None,
    inputs: Sequence[StagedInput] = (),
) -> StreamedZip:
    """The zip archive of ``folder`` in a temporary file (blocking: call it in a thread).

    ``extra`` adds text files at the root (name -> text), over any of the same name;
    ``inputs`` (a run's verified copies) go in at ``NAME`` with their trees, over the
    folder's files of those names; ``folder=None`` zips ``extra`` and ``inputs`` alone.
    Raises :class:`InvalidRequest` when the folder is missing or the files kept add up
    to more than ``max_bytes``.
    """
    root = None if folder is None else Path(folder)
    if root is not None and not root.is_dir():
        raise InvalidRequest(f"workspace folder {str(folder)!r} does not exist")
    # Outlives this call: the streamed request closes it once sent.
    file = tempfile.TemporaryFile(prefix="gitpilot-workspace-")  # noqa: SIM115
    try:
        with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            replaced = set(extra or ()) | {one.name for one in inputs}
            taken = _add_inputs(archive, inputs, max_bytes)
            if root is not None:
                _add_folder(archive, root, max_bytes - taken, replaced, set(replaced))
            for name, text in (extra or {}).items():
                archive.writestr(name, text.encode("utf-8"))
        size = file.tell()
        file.seek(0)
    except BaseException:
        file.close()
        raise
    return StreamedZip(file, size)


def _add_inputs(archive: zipfile.ZipFile, inputs: Sequence[StagedInput], max_bytes: int) -> int:
    """Add the run's inputs (regular files only: the copies hold nothing else); their bytes."""
    total = 0
    for one in inputs:
        files = (
            [(one.path, one.name)]
            if one.kind == "file"
            else [
                (
                    Path(top) / name,
                    (Path(one.name) / Path(top).relative_to(one.path) / name).as_posix(),
                )
                for top, _, names in os.walk(one.path)
                for name in names
            ]
        )
        for path, arcname in files:
            total += path.stat().st_size
            if total > max_bytes:
                raise InvalidRequest(
                    f"the inputs hold more than {max_bytes // (1024 * 1024)} MiB to send to the "
                    "MatrixLab Runner (matrixlab_max_workspace_mb); nothing was sent"
                )
            archive.write(path, arcname)
    return total


def _add_folder(
    archive: zipfile.ZipFile, root: Path, max_bytes: int, replaced: set[str], tops: set[str]
) -> None:
    total = 0
    for current, dirnames, filenames in os.walk(root):
        here = Path(current)
        # A folder an input replaces is the input's alone (at the top of the workspace).
        dirnames[:] = sorted(
            d for d in dirnames if not _skip_dir(here / d) and (here != root or d not in tops)
        )
        for name in sorted(filenames):
            path = here / name
            if path.is_symlink() or not path.is_file():
                continue
            total += path.stat().st_size
            if total > max_bytes:
                raise InvalidRequest(
                    f"the folder {str(root)!r} of this file run holds more than "
                    f"{max_bytes // (1024 * 1024)} MiB to send to the MatrixLab Runner "
                    f"(matrixlab_max_workspace_mb); nothing was sent. Move the file to a "
                    "smaller folder, or ask an administrator to raise the cap"
                )
            name = path.relative_to(root).as_posix()
            if name not in replaced:
                archive.write(path, name)


def request_content(body: dict[str, Any]) -> dict[str, Any]:
    """The ``httpx`` keyword arguments that send ``body`` as JSON.

    A workspace given as a :class:`StreamedZip` is streamed: the JSON around it, then
    its base64 text read from the temporary file chunk by chunk, so the server never
    holds the encoded workspace (the file is closed once sent).
    """
    workspace = body.get("workspace")
    archive = workspace.get("zip_base64") if isinstance(workspace, dict) else None
    if not isinstance(archive, StreamedZip):
        return {"json": body}
    assert isinstance(workspace, dict)
    text = json.dumps({**body, "workspace": {**workspace, "zip_base64": _PLACEHOLDER}})
    before, after = text.split(json.dumps(_PLACEHOLDER), 1)
    head, tail = (before + '"').encode(), ('"' + after).encode()
    length = len(head) + archive.base64_size() + len(tail)

    async def chunks() -> AsyncIterator[bytes]:
        try:
            yield head
            while data := await asyncio.to_thread(archive.file.read, CHUNK_BYTES):
                yield base64.b64encode(data)
            yield tail
        finally:
            archive.file.close()

    headers = {"Content-Type": "application/json", "Content-Length": str(length)}
    return {"content": chunks(), "headers": headers}
