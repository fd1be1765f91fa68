"""Claims on host ids that every server of one user sees: an ``flock`` per id.

A run's host uid must be no other run's, across servers too (two servers of one user,
or two root servers on one host). A claim is an exclusive ``flock`` on a file named
after the id in the user's claim folder (:func:`claim_folder`): a lock another process
holds means the id is taken, and a server killed outright lets its claims go with its
fds. The files stay (one per id used at once, at most): removing one would race with a
server opening it. :mod:`.subids` claims a non-root server's ids this way, and
:data:`.nsfree.RUN_IDS` a root server's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import tempfile
from pathlib import Path

#: The claim folder's name, in ``XDG_RUNTIME_DIR`` (else the temp dir, with the uid).
CLAIM_FOLDER = "gitpilot-run-ids"


def claim_folder() -> Path:
    """Where this user's servers claim run ids: ``$XDG_RUNTIME_DIR/gitpilot-run-ids``, or
    ``gitpilot-run-ids-UID`` in the temp dir (neither is in a run's view)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / CLAIM_FOLDER
    return Path(tempfile.gettempdir()) / f"{CLAIM_FOLDER}-{os.geteuid()}"


def private_folder(folder: Path) -> bool:
    """True when ``folder`` is (made, if missing) a real folder of this user's alone:
    only then are its locks trusted (another user could hold one to starve runs)."""
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    try:
        info = folder.lstat()
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.geteuid()
        and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def lock_id(folder: Path, name: str) -> int | None:
    """The fd of the claim on ``name`` in ``folder``, None when another process holds it."""
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
    fd = os.open(folder / name, flags, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    return fd
