"""Real paths with a record of what told them, so a later look can be cheap and exact.

A :class:`Lookup` answers what :func:`os.path.isdir`, :func:`os.path.isfile` and
:func:`os.path.realpath` answer for a path, resolving it component by component as
the kernel does (every symlink followed, ``..`` taken after the component before it is
resolved), and which file a path names (what :func:`os.stat` says of its device
and inode). It looks at each path it passes through once, with ``lstat`` (and
``readlink`` for a symlink), and keeps what it saw: missing, or its kind, device and
inode (and a symlink's target). Its answers are a function of those records alone.

:meth:`Lookup.current` looks at each recorded path again. When every one is as it was,
every answer is what a new lookup would give now; when one differs (a folder made,
removed or renamed away, a symlink re-pointed, in the last component or any before
it), it is False and the caller starts a new lookup.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

#: At most this many symlinks in one resolution, as Linux (``MAXSYMLINKS``): more fails.
MAX_LINKS = 40

#: What one path was: None (missing, or not to be looked at), else its kind
#: (``stat.S_IFMT``), which file it is (device, inode) and, for a symlink, its target.
Seen = tuple[int, int, int, str | None] | None


def _look(path: str) -> Seen:
    try:
        info = os.lstat(path)
        kind = stat.S_IFMT(info.st_mode)
        target = os.readlink(path) if kind == stat.S_IFLNK else None
    except (OSError, ValueError):  # (ValueError: a NUL or an unencodable character)
        return None
    return kind, info.st_dev, info.st_ino, target


def _cwd() -> str:
    try:
        return os.getcwd()
    except OSError:  # removed: a relative path names nothing
        return ""


class Lookup:
    """Resolves paths and remembers every path it looked at (see the module docstring).

    Not for use by two threads at once while it resolves; :meth:`current` may be
    called from any thread once it is done.
    """

    def __init__(self) -> None:
        #: Each path looked at and what it was, in the order first looked at.
        self.seen: dict[str, Seen] = {}
        #: The working folder relative paths were resolved in (None: there were none;
        #: empty: it was removed).
        self.cwd: str | None = None

    def _see(self, path: str) -> Seen:
        try:
            return self.seen[path]
        except KeyError:
            found = self.seen[path] = _look(path)
            return found

    def resolve(self, path: str) -> tuple[str, int] | None:
        """``(real path, kind)`` of what ``path`` names, or None when it names nothing
        (missing, a symlink loop, a file where a folder must be, no permission)."""
        if not path.startswith("/"):
            if self.cwd is None:
                self.cwd = _cwd()
            if not self.cwd:
                return None
            path = f"{self.cwd}/{path}"
        todo = path.split("/")
        todo.reverse()
        real, kind, links = "", stat.S_IFDIR, 0
        while todo:
            name = todo.pop()
            if kind != stat.S_IFDIR:
                return None  # something follows a file that is not a folder
            if name in ("", "."):
                continue
            if name == "..":
                real = real.rpartition("/")[0]  # resolved: its parent is the lexical one
                continue
            nxt = f"{real}/{name}"
            seen = self._see(nxt)
            if seen is None:
                return None
            kind, _, _, target = seen
            if target is None:
                real = nxt
                continue
            links += 1
            if links > MAX_LINKS or not target:
                return None
            if target.startswith("/"):
                real = ""
            parts = target.split("/")
            parts.reverse()
            todo += parts
            kind = stat.S_IFDIR  # where the link is; what it names is looked at next
        return real or "/", kind

    def identity(self, path: str) -> tuple[int, int] | None:
        """Which file ``path`` names (device, inode, as :func:`os.stat` says), or None."""
        found = self.resolve(path)
        seen = self._see(found[0]) if found is not None else None
        return None if seen is None else (seen[1], seen[2])

    def folders(self, paths: Iterable[str]) -> set[str]:
        """The real paths of those of ``paths`` that are folders (:func:`os.path.isdir`)."""
        return self._of_kind(paths, stat.S_IFDIR)

    def files(self, paths: Iterable[str]) -> set[str]:
        """The real paths of those of ``paths`` that are regular files
        (:func:`os.path.isfile`)."""
        return self._of_kind(paths, stat.S_IFREG)

    def _of_kind(self, paths: Iterable[str], kind: int) -> set[str]:
        found = (self.resolve(path) for path in paths)
        return {real for real, is_kind in filter(None, found) if is_kind == kind}

    def current(self) -> bool:
        """True when every path looked at is as it was (then every answer still holds)."""
        if self.cwd is not None and _cwd() != self.cwd:
            return False
        return all(_look(path) == was for path, was in self.seen.items())
