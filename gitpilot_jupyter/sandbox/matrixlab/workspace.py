"""Zip a folder as a Runner workspace (``POST /run``), leaving out what never belongs in one.

Skipped: ``.git`` and other VCS folders, virtualenvs (any folder holding a
``pyvenv.cfg``), ``node_modules``, caches, ``dist``, ``build`` and every
symlink. The Runner refuses workspaces over 500 MiB; so do we, before sending.
"""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

from ..errors import InvalidRequest

MAX_WORKSPACE_BYTES = 500 * 1024 * 1024

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
                        f"the workspace {str(folder)!r} is larger than {max_bytes} bytes; "
                        "the Runner refuses it"
                    )
                name = path.relative_to(root).as_posix()
                if extra is None or name not in extra:
                    archive.write(path, name)
        for name, text in (extra or {}).items():
            archive.writestr(name, text.encode("utf-8"))
    return buffer.getvalue()
