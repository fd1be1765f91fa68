"""Removing a run's folder, whatever the snippet left in it.

``shutil.rmtree`` recurses (a 1,100-deep tree raises ``RecursionError``, which
``ignore_errors`` does not catch), follows full paths (``ENAMETOOLONG`` past
``PATH_MAX``) and gives up on folders without write or search permission.
:func:`remove_tree` walks with one directory fd at a time, climbing back with
``..``, makes read-only folders writable as it goes, and never raises.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import logging
import os
import re
import secrets
import stat
import sys
import tempfile
import threading
from collections.abc import Callable

if sys.platform != "win32":
    import fcntl

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


#: Every run folder's name starts with this (``debug`` and the tests look for it).
RUN_DIR_PREFIX = "gitpilot-sandbox-"
#: The folder where a server keeps what its runs handed back from ``out/``
#: (:mod:`..service.outstore`): marked and swept as run folders are.
OUT_STORE_PREFIX = "gitpilot-out-"
#: In each run folder on the host (never inside the run, which sees its own tmpfs): the
#: name of its server's lock file (:func:`server_lock`), so a later server can tell a
#: folder whose server died without cleaning up (SIGKILL, OOM, power loss) from a live one.
OWNER_FILE = ".owner"
#: The lock files of live servers, next to their run folders: ``<prefix><16 hex>``.
SERVER_LOCK_PREFIX = f".{RUN_DIR_PREFIX}server-"
_SERVER_LOCK_NAME = re.compile(re.escape(SERVER_LOCK_PREFIX) + r"[0-9a-f]{16}")


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of its stat), or None when it is gone.

    With the pid it names one process for good: a pid in use again by another process
    has another start time.
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat_file:
            stat_line = stat_file.read()
    except OSError:
        return None
    fields = stat_line.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


_OWN_START: dict[int, str] = {}


def owner(pid: int | None = None) -> tuple[int, str]:
    """``(pid, start time)`` of process ``pid`` (this one): what names it for good, in
    run cgroups' names. This process's is read once (a start time never changes; a
    forked child has a pid of its own). Raises ProcessLookupError for a process that
    is gone.
    """
    pid = os.getpid() if pid is None else pid
    started = _OWN_START.get(pid) or start_time(pid)
    if started is None:
        raise ProcessLookupError(pid)
    if pid == os.getpid():
        _OWN_START[pid] = started
    return pid, started


def owner_gone(pid: int, started: str) -> bool:
    """True when the process named by ``(pid, started)`` (see :func:`owner`) no longer
    runs: its pid is free, or another process's now."""
    return start_time(pid) != started


#: (folder, pid) -> (fd, name) of the lock this process holds in that folder.
_LOCKS: dict[tuple[str, int], tuple[int, str]] = {}
_LOCKS_LOCK = threading.Lock()


def server_lock(base: str) -> str:
    """The name of this process's lock file in ``base``, made and locked on first use.

    A pid and its start time name a process only in its own pid namespace: a server in
    another one (a container, ``unshare --pid``) sharing the temp dir sees other pids.
    A lock cannot be mistaken that way: this process holds a shared ``flock`` on the
    file as long as it lives (the kernel lets go when it dies, however it dies), and a
    sweep removes a folder only when it can take the lock itself. The file is locked
    before it gets its name, so no sweep ever finds it unlocked while its server runs.
    """
    key = (base, os.getpid())  # a forked child takes a lock of its own
    with _LOCKS_LOCK:
        held = _LOCKS.get(key)
        if held is not None:
            return held[1]
        fd, starting = tempfile.mkstemp(prefix=f"{SERVER_LOCK_PREFIX}starting-", dir=base)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            name = f"{SERVER_LOCK_PREFIX}{secrets.token_hex(8)}"
            os.rename(starting, os.path.join(base, name))
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(starting)
            raise
        _LOCKS[key] = (fd, name)
    atexit.register(_drop_lock, key)
    return name


def _drop_lock(key: tuple[str, int]) -> None:
    # At a clean exit: the lock file goes (in a forked child, only the child's own).
    if key[1] != os.getpid():
        return
    with _LOCKS_LOCK:
        held = _LOCKS.pop(key, None)
    if held is not None:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(key[0], held[1]))
        with contextlib.suppress(OSError):
            os.close(held[0])


def make_run_dir(prefix: str = RUN_DIR_PREFIX) -> str:
    """A fresh private run folder under the temp dir, marked with its server (mode 0700);
    ``prefix`` :data:`OUT_STORE_PREFIX`: the server's store of runs' files."""
    base = tempfile.gettempdir()
    if sys.platform == "win32":  # no flock: unmarked, so no sweep ever takes it
        return tempfile.mkdtemp(prefix=prefix, dir=base)
    mark = f"{server_lock(base)} pid={os.getpid()} pidns={_pid_namespace()}\n"
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    fd = os.open(os.path.join(path, OWNER_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as mark_file:
        mark_file.write(mark)  # the pid and its namespace are for a person reading it
    return path


class SpareRunDirs:
    """Run folders made ahead (:func:`make_run_dir`), at most one per temp dir: made off
    every run's path (by the namespace-free engine's ``make_ahead``, after a run's
    answer or a warm slot's start) and taken by the next cold run, which then skips
    the ``mkdir`` and the owner mark (0.3-0.6 ms). A spare is an empty 0700 folder of
    this server's, as a new one is; spares left at exit are removed then (a killed
    server's go with its other folders, :func:`remove_orphaned_run_dirs`).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[str, str] = {}
        self._at_exit = False

    def take(self) -> str:
        """A fresh run folder: the spare of the temp dir when one is there, else new."""
        base = tempfile.gettempdir()
        with self._lock:
            path = self._ready.pop(base, None)
        if path is not None and os.path.isdir(path):
            return path
        return make_run_dir()

    def make_ahead(self) -> None:
        """Make the temp dir's spare unless one is ready (blocking: a worker's)."""
        base = tempfile.gettempdir()
        with self._lock:
            if base in self._ready:
                return
        try:
            path = make_run_dir()
        except OSError:
            return  # the run makes its own (and says why)
        with self._lock:
            made = base not in self._ready
            if made:
                self._ready[base] = path
            if not self._at_exit:
                atexit.register(self.close)
                self._at_exit = True
        if not made:
            remove_tree(path)

    def close(self) -> None:
        """Remove every spare (at exit; tests)."""
        with self._lock:
            ready, self._ready = self._ready, {}
        for path in ready.values():
            remove_tree(path)


#: The spare run folders of this process's runs.
SPARE_DIRS = SpareRunDirs()


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return "unknown"


def _lock_free(base: str, name: str) -> bool:
    """True when no process holds the lock file ``name`` in ``base`` (or it is gone)."""
    if sys.platform == "win32" or not _SERVER_LOCK_NAME.fullmatch(name):
        return False
    try:
        fd = os.open(os.path.join(base, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return True  # its server removed it at exit, or a sweep did once it was free
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its server runs (or cannot tell: leave it)
    finally:
        os.close(fd)  # a lock taken goes with the descriptor
    return True


def _orphaned(path: str, base: str) -> bool:
    """True when the server that made the run folder ``path`` no longer runs."""
    try:
        with open(os.path.join(path, OWNER_FILE), encoding="ascii") as mark:
            name = mark.read(256).partition(" ")[0]
    except (OSError, UnicodeDecodeError):
        return False  # no mark (or not ours to read): leave it
    return _lock_free(base, name)


_SWEPT: set[str] = set()


def remove_orphaned_run_dirs_once() -> None:
    """:func:`remove_orphaned_run_dirs` for the temp dir, the first time a process asks."""
    base = tempfile.gettempdir()
    if base not in _SWEPT:
        _SWEPT.add(base)
        remove_orphaned_run_dirs(base)


def remove_orphaned_run_dirs(folder: str | None = None) -> int:
    """Remove the run folders under ``folder`` (the temp dir) whose server died; how many.

    Only folders this user owns whose mark names a server lock no process holds; a
    folder of a live server (in whatever pid namespace), or without a mark, is left
    alone. The lock files of servers that are gone go too. Never raises.
    """
    removed = 0
    base = folder or tempfile.gettempdir()
    try:
        entries = list(os.scandir(base))
    except OSError:
        return 0
    uid = os.geteuid()
    for entry in entries:
        with contextlib.suppress(OSError):
            if (
                entry.name.startswith((RUN_DIR_PREFIX, OUT_STORE_PREFIX))
                and entry.is_dir(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_uid == uid
                and _orphaned(entry.path, base)
                and remove_tree(entry.path)
            ):
                removed += 1
    for entry in entries:  # after the folders: a folder naming a missing lock is gone too
        with contextlib.suppress(OSError):
            if entry.stat(follow_symlinks=False).st_uid == uid and _lock_free(base, entry.name):
                os.unlink(entry.path)
    if removed:
        log.info("removed %d run folders of sandbox servers that are gone", removed)
    return removed


class AfterRuns:
    """Removes ended runs' cgroups and folders after their answer, in one worker thread.

    A run's processes are killed before it answers; what is left of it (an empty
    cgroup, the run folder) holds nothing that runs, so removing it need not delay the
    answer. :meth:`wait` (on closing) and interpreter exit wait for every removal.
    """

    def __init__(self) -> None:
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._pending: set[concurrent.futures.Future[None]] = set()
        self._lock = threading.Lock()

    def submit(self, removal: Callable[[], None]) -> None:
        """Do ``removal`` (which must not raise) soon, off the caller's thread; in the
        caller's, now, once the interpreter is shutting down (it starts no thread then:
        a run stopped by Ctrl-C ends after that)."""
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="gitpilot-after-runs"
                )
            future: concurrent.futures.Future[None] | None = None
            # "cannot schedule new futures after interpreter shutdown": done here, below.
            with contextlib.suppress(RuntimeError):
                future = self._executor.submit(removal)
                self._pending.add(future)
        if future is not None:
            future.add_done_callback(self._done)
            return
        try:
            removal()
        except Exception:  # as the worker's failures are: logged, never raised at a caller
            log.exception("cleaning up after a run failed")

    def _done(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("cleaning up after a run failed", exc_info=future.exception())

    def wait(self, timeout: float | None = None) -> None:
        """Block until every removal submitted so far is done."""
        with self._lock:
            pending = list(self._pending)
        concurrent.futures.wait(pending, timeout=timeout)
