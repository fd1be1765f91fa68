"""File plans: read a file under a root folder, and nothing outside it."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import FileAccessError

MAX_FILE_BYTES = 1_000_000


def read_under_root(root: Path, file: str) -> str:
    """The text of ``file`` (relative to ``root``, or absolute inside it).

    Paths that resolve outside ``root`` (``..``, symlinks, absolute paths elsewhere),
    missing files, unreadable files and files over :data:`MAX_FILE_BYTES` raise
    :class:`FileAccessError` (400).
    """
    if not isinstance(file, str) or not file.strip() or "\x00" in file:
        raise FileAccessError("file must be a non-empty relative path")
    root = root.resolve()
    candidate = Path(file) if os.path.isabs(file) else root / file
    candidate = candidate.resolve()
    if candidate != root and root not in candidate.parents:
        raise FileAccessError(f"file {file!r} is outside the server's root folder")
    if not candidate.is_file():
        raise FileAccessError(f"file {file!r} does not exist or is not a file")
    try:
        data = candidate.read_bytes()
    except OSError as exc:
        raise FileAccessError(f"cannot read {file!r}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise FileAccessError(f"file {file!r} is larger than {MAX_FILE_BYTES} bytes")
    return data.decode("utf-8", errors="replace")
