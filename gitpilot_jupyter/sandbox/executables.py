"""Finding an executable on ``PATH``, its answer kept while it stays true.

Every plan and run asks where the interpreter and bubblewrap are; a ``PATH`` search
is a ``stat`` per folder until it finds them. :func:`which` answers as
:func:`shutil.which` does and keeps a found path while ``PATH`` and that file stay
the same, re-checked with one ``stat``.
"""

from __future__ import annotations

import contextlib
import os
import shutil

#: (name, PATH) -> the path found and what that file was then (device, inode, mode,
#: owner, group).
_FOUND: dict[tuple[str, str], tuple[str, tuple[int, int, int, int, int]]] = {}


def _identity(path: str) -> tuple[int, int, int, int, int]:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_gid)


def which(name: str) -> str | None:
    """The path of executable ``name`` on ``PATH`` (as :func:`shutil.which`), or None.

    A name not found is searched for again on every call, so a tool installed since
    is seen at once; a found one is searched again once ``PATH`` changes or that file
    is removed, replaced or changes its mode or owner. (Not seen until then: the same
    name installed later into a folder earlier on ``PATH``.)
    """
    search = os.environ.get("PATH", os.defpath)
    key = (name, search)
    kept = _FOUND.get(key)
    if kept is not None:
        try:
            if _identity(kept[0]) == kept[1]:
                return kept[0]
        except OSError:
            pass
        _FOUND.pop(key, None)
    found = shutil.which(name, path=search)
    if found is not None:
        with contextlib.suppress(OSError):
            _FOUND[key] = (found, _identity(found))
    return found
