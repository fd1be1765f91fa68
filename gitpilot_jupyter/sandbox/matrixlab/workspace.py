"""Zip a folder as a Runner workspace (``POST /run``), leaving out what never belongs in one.

Skipped: ``.git`` and other VCS folders, virtualenvs (any folder holding a
``pyvenv.cfg``), ``node_modules``, caches, ``dist``, ``build`` and every
symlink. The Runner refuses workspaces over 500 MiB; we refuse those over the
administrator's cap (``matrixlab_max_workspace_mb``, at most the Runner's) before
sending. The Runner's protocol takes the workspace as base64 inside a JSON body
(``/run`` and ``/workspaces/upload`` alike), so it cannot be streamed: the cap is
what bounds the server's memory for one file run (about 2.4 times the cap).
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import InvalidRequest
from .config import RUNNER_MAX_WORKSPACE_MB

MAX_WORKSPACE_BYTES = RUNNER_MAX_WORKSPACE_MB * 1024 * 1024

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


def zip_workspace(
    folder: str | Path,
    max_bytes: int = MAX_WORKSPACE_BYTES,
    *,
    extra: Mapping[str, str] | None = None,
) -> bytes:
    """The zip archive of ``folder`` (blocking: call it in a thread from async code).

    ``extra`` adds text files at the root (name -> text), over any of the same name.
    Raises :class:`InvalidRequest` when the folder is missing or the files kept
    add up to more than ``max_bytes``.
    """
    root = Path(folder)
    if not root.is_dir():
        raise InvalidRequest(f"workspace folder {str(folder)!r} does not exist")
    buffer = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for current, dirnames, filenames in os.walk(root):
            here = Path(current)
            dirnames[:] = sorted(d for d in dirnames if not _skip_dir(here / d))
            for name in sorted(filenames):
                path = here / name
                if path.is_symlink() or not path.is_file():
                    continue
                total += path.stat().st_size
                if total > max_bytes:
                    raise InvalidRequest(
                        f"the folder {str(folder)!r} of this file run holds more than "
                        f"{max_bytes // (1024 * 1024)} MiB to send to the MatrixLab Runner "
                        f"(matrixlab_max_workspace_mb); nothing was sent. Move the file to a "
                        "smaller folder, or ask an administrator to raise the cap"
                    )
                name = path.relative_to(root).as_posix()
                if extra is None or name not in extra:
                    archive.write(path, name)
        for name, text in (extra or {}).items():
            archive.writestr(name, text.encode("utf-8"))
    return buffer.getvalue()
