"""File plans: read a file under a root folder, and nothing outside it.

Bounded work before any check passes: the path is resolved (a symlink loop is a
400, not a crash), the opened file is ``fstat``-ed (a regular file no larger than
the limit) and at most the limit plus one byte is read, whatever the file claims.
The service calls this in a worker thread, never on the server's event loop.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import FileAccessError

MAX_FILE_BYTES = 1_000_000


def _resolve(path: Path, file: str) -> Path:
    try:
        return path.resolve()
    except RuntimeError:  # Python < 3.13 reports a symlink loop this way
        raise FileAccessError(f"file {file!r} is a symlink loop") from None
    except OSError as exc:
        raise FileAccessError(f"cannot resolve {file!r}: {exc.strerror or exc}") from None


def path_under_root(root: Path, file: str) -> Path:
    """The resolved path of ``file`` (relative to ``root``, or absolute inside it).

    :class:`FileAccessError` (400) for an empty name, a symlink loop or a path that
    resolves outside ``root``; whether it exists is not checked.
    """
    if not isinstance(file, str) or not file.strip() or "\x00" in file:
        raise FileAccessError("file must be a non-empty relative path")
    root = _resolve(root, str(root))
    candidate = _resolve(Path(file) if os.path.isabs(file) else root / file, file)
    if candidate != root and root not in candidate.parents:
        raise FileAccessError(f"file {file!r} is outside the server's root folder")
    return candidate


def read_under_root(root: Path, file: str, *, limit: int = MAX_FILE_BYTES) -> str:
    """The text of ``file`` (relative to ``root``, or absolute inside it).

    Paths that resolve outside ``root`` (``..``, symlinks, absolute paths elsewhere),
    symlink loops, missing files, anything but a regular file (a FIFO is never opened
    for a blocking read), unreadable files and files over ``limit`` bytes raise
    :class:`FileAccessError` (400).
    """
    candidate = path_under_root(root, file)
    try:
        # O_NONBLOCK: a FIFO swapped in after the checks must not hang the worker.
        fd = os.open(candidate, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise FileAccessError(f"file {file!r} does not exist or is not a file") from None
    except OSError as exc:
        raise FileAccessError(f"cannot read {file!r}: {exc.strerror or exc}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FileAccessError(f"file {file!r} does not exist or is not a file")
        raise FileAccessError(f"file {file!r} is larger than {limit} bytes")
    with os.fdopen(fd, "rb") as fh:
        try:
            data = fh.read(limit + 1)  # a file that grew, or lies about its size, stops here
        except OSError as exc:
            raise FileAccessError(f"cannot read {file!r}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise FileAccessError(f"file {file!r} is larger than {limit} bytes")
    return data.decode("utf-8", errors="replace")
