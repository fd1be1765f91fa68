"""Removing a run's folder, whatever the snippet left in it.

``shutil.rmtree`` recurses (a 1,100-deep tree raises ``RecursionError``, which
``ignore_errors`` does not catch), follows full paths (``ENAMETOOLONG`` past
``PATH_MAX``) and gives up on folders without write or search permission.
:func:`remove_tree` walks with one directory fd at a time, climbing back with
``..``, makes read-only folders writable as it goes, and never raises.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat

log = logging.getLogger(__name__)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(name: str, parent: int) -> int:
    """Open ``name`` under ``parent``; make it searchable first if it is not."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:
        os.chmod(name, stat.S_IRWXU, dir_fd=parent, follow_symlinks=False)
        return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _first_subdir(fd: int) -> str | None:
    """Unlink every non-folder in ``fd``; the name of one sub-folder, or None when empty."""
    with os.scandir(fd) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                return entry.name
            try:
                os.unlink(entry.name, dir_fd=fd)
            except PermissionError:
                os.chmod(fd, stat.S_IRWXU)  # a read-only folder: make it writable
                os.unlink(entry.name, dir_fd=fd)
    return None


def _rmdir(name: str, parent: int) -> None:
    try:
        os.rmdir(name, dir_fd=parent)
    except PermissionError:
        os.chmod(parent, stat.S_IRWXU)
        os.rmdir(name, dir_fd=parent)


def remove_tree(path: str | os.PathLike[str]) -> bool:
    """Remove ``path`` and all below it; True when it is gone. Never raises."""
    try:
        return _remove(os.fspath(path))
    except Exception:
        log.exception("could not remove the run folder %s", path)
        return not os.path.lexists(path)


def _remove(path: str) -> bool:
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return True
    except (NotADirectoryError, OSError) as exc:
        if isinstance(exc, PermissionError):
            os.chmod(path, stat.S_IRWXU)
            fd = os.open(path, _DIR_FLAGS)
        else:
            os.unlink(path)  # a file or a symlink
            return True
    names: list[str] = []  # the path from ``path`` down to ``fd``, one name a level
    try:
        while True:
            sub = _first_subdir(fd)
            if sub is not None:
                child = _open_dir(sub, fd)
                os.close(fd)
                fd = child
                names.append(sub)
                continue
            if not names:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            _rmdir(names.pop(), fd)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    os.rmdir(path)
    return True
