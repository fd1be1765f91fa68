"""Collecting a run's ``out/`` on this host, after the run (blocking: a worker thread).

The walk holds one directory fd per level and opens every name relative to its
folder's fd with ``O_NOFOLLOW``: no symlink is ever followed, neither a file's nor a
folder's (``out/`` itself included), so a name cannot lead outside ``out/``. Only
what ``lstat`` says is a regular file is opened (``O_NONBLOCK`` besides: a FIFO
swapped in meanwhile never blocks the read), and ``fstat`` of the opened fd says it
again. Each file is copied into the service's folder under a number, never under
its own name, at most its ``fstat`` size: one that grew while it was copied is cut
there, with a note. The walk stops at the count cap, and after a bounded number of
entries of any kind: 100,000 tiny files cost one folder listing's worth of work.

A session collects its ``out/`` after each cell (:mod:`..sessions`): given the stamps
of the files kept before (``seen``), a file whose stamp is the same is left out (it
was handed back already), so each cell's result lists what that cell wrote or changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import select
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..backend import RunRequest
from ..outfiles import MAX_OUT_DEPTH, MAX_OUT_NAME_CHARS, OUT_DIR, OutCaps, OutFile, human_bytes
from ..results import RunResult

if TYPE_CHECKING:
    from .isolation import Launch

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_COPY_CHUNK = 1024 * 1024
#: Entries of any kind looked at, beyond the files kept, before the walk gives up.
_EXTRA_ENTRIES = 1000
#: Names quoted in one note (the rest are counted).
_NAMES_QUOTED = 3


#: What tells a file of ``out/`` unchanged since the last look: inode, size, mtime, ctime
#: (ctime: a cell that writes and then sets the old mtime back still changes it).
Stamp = tuple[int, int, int, int]


def _stamp(info: os.stat_result) -> Stamp:
    return (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def stored_name(index: int) -> str:
    """The name the ``index``-th collected file has in the service's folder."""
    return f"{index:06d}"


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink (not followed)"
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


@dataclass
class Collected:
    """What came out of ``out/``: the files kept (the ``index``-th under
    :func:`stored_name`), and one sentence for each kind of thing left behind."""

    files: list[OutFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Bytes kept, all files together.
    size: int = 0
    #: The stamp of each file kept, or left out as unchanged (by name): the next
    #: look's ``seen``.
    stamps: dict[str, Stamp] = field(default_factory=dict)
    _skipped: dict[str, list[str]] = field(default_factory=dict)

    def skip(self, why: str, name: str) -> None:
        """Leave ``name`` out for reason ``why`` (one note per reason, at the end)."""
        self._skipped.setdefault(why, []).append(name)

    def finish(self) -> Collected:
        """Turn what was skipped into notes; return self."""
        for why, names in self._skipped.items():
            quoted = ", ".join(f"{OUT_DIR}/{n}" for n in names[:_NAMES_QUOTED])
            more = f" and {len(names) - _NAMES_QUOTED} more" if len(names) > _NAMES_QUOTED else ""
            self.notes.append(f"{OUT_DIR}/: left out {quoted}{more}: {why}")
        self._skipped.clear()
        return self


class _Walk:
    """One collection (see the module docstring)."""

    def __init__(self, dest: Path, caps: OutCaps, seen: dict[str, Stamp] | None) -> None:
        self.dest = dest
        self.caps = caps
        self.seen = seen or {}
        self.found = Collected()
        self.entries = 0
        self.stopped: str | None = None

    def run(self, top: int) -> Collected:
        stack: list[tuple[int, str, list[os.DirEntry[str]]]] = []
        try:
            stack.append((top, "", self._list(top)))
            while stack and self.stopped is None:
                fd, prefix, entries = stack[-1]
                if not entries:
                    stack.pop()
                    if fd != top:
                        os.close(fd)
                    continue
                entry = entries.pop()
                sub = self._visit(fd, prefix, entry, depth=len(stack))
                if sub is not None:
                    stack.append(sub)
        finally:
            for fd, _, _ in stack:
                if fd != top:
                    os.close(fd)
        if self.stopped is not None:
            self.found.notes.append(self.stopped)
            for name, stamp in self.seen.items():  # not looked at: as they were
                self.found.stamps.setdefault(name, stamp)
        return self.found.finish()

    def _list(self, fd: int) -> list[os.DirEntry[str]]:
        """A folder's entries, at most as many as the walk may still look at."""
        budget = self.caps.max_files + _EXTRA_ENTRIES - self.entries + 1
        out: list[os.DirEntry[str]] = []
        with os.scandir(fd) as listing:
            for entry in listing:
                out.append(entry)
                if len(out) >= budget:
                    break
        out.reverse()  # popped from the end: listing order
        return out

    def _visit(
        self, fd: int, prefix: str, entry: os.DirEntry[str], *, depth: int
    ) -> tuple[int, str, list[os.DirEntry[str]]] | None:
        """Keep, skip or enter one entry; a folder to walk next, or None."""
        self.entries += 1
        name = f"{prefix}{entry.name}"
        if self.entries > self.caps.max_files + _EXTRA_ENTRIES:
            self.stopped = (
                f"{OUT_DIR}/: stopped after {self.entries - 1} entries "
                f"({len(self.found.files)} files kept): the rest was not looked at"
            )
            return None
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            self.found.skip("the name is not UTF-8", shown)
            return None
        if len(name) > MAX_OUT_NAME_CHARS:
            self.found.skip(f"a name longer than {MAX_OUT_NAME_CHARS} characters", name[:80])
            return None
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            return None  # gone meanwhile
        mode = info.st_mode
        if stat.S_ISDIR(mode):
            return self._enter(fd, name, entry.name, depth)
        if not stat.S_ISREG(mode):
            self.found.skip(f"not a regular file ({_kind(mode)})", name)
            return None
        if self.seen.get(name) == _stamp(info):
            self.found.stamps[name] = _stamp(info)  # handed back already, as it is
            return None
        if len(self.found.files) >= self.caps.max_files:
            self.stopped = (
                f"{OUT_DIR}/: stopped at the cap of {self.caps.max_files} files: "
                "the rest was left out"
            )
            return None
        if self._keep(fd, name, entry.name):
            self.found.stamps[name] = _stamp(info)
        return None

    def _enter(
        self, fd: int, name: str, base: str, depth: int
    ) -> tuple[int, str, list[os.DirEntry[str]]] | None:
        if depth >= MAX_OUT_DEPTH:
            self.found.skip(f"deeper than {MAX_OUT_DEPTH} folders", name + "/")
            return None
        try:
            sub = os.open(base, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            self.found.skip(f"a folder that could not be opened ({_reason(exc)})", name + "/")
            return None
        try:
            return sub, name + "/", self._list(sub)
        except OSError as exc:
            os.close(sub)
            self.found.skip(f"a folder that could not be read ({_reason(exc)})", name + "/")
            return None

    def _keep(self, fd: int, name: str, base: str) -> bool:
        """Copy one regular file into the service's folder, within the caps; True when
        it was kept."""
        try:
            src = os.open(base, _FILE_FLAGS, dir_fd=fd)
        except OSError as exc:
            why = "a symlink (not followed)" if exc.errno == errno.ELOOP else _reason(exc)
            self.found.skip(f"could not be opened ({why})", name)
            return False
        try:
            info = os.fstat(src)
            if not stat.S_ISREG(info.st_mode):
                self.found.skip(f"not a regular file ({_kind(info.st_mode)})", name)
                return False
            left = self.caps.max_bytes - self.found.size
            if info.st_size > left:
                self.found.skip(
                    f"over the cap of {human_bytes(self.caps.max_bytes)} in all "
                    f"({human_bytes(left)} were left)",
                    name,
                )
                return False
            return self._copy(src, name, info.st_size)
        finally:
            os.close(src)

    def _copy(self, src: int, name: str, size: int) -> bool:
        index = len(self.found.files)
        target = self.dest / stored_name(index)
        digest = hashlib.sha256()
        copied = 0
        try:
            out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as exc:  # the server's own disk: nothing more can be kept
            self.stopped = f"{OUT_DIR}/: stopped, the server could not keep more ({_reason(exc)})"
            return False
        failed: str | None = None
        try:
            while copied < size:
                try:
                    chunk = os.read(src, min(_COPY_CHUNK, size - copied))
                except OSError as exc:
                    self.found.skip(f"could not be read ({_reason(exc)})", name)
                    failed = "read"
                    break
                if not chunk:
                    break  # it shrank meanwhile: what was there
                digest.update(chunk)
                try:
                    _write_all(out, chunk)
                except OSError as exc:
                    self.stopped = (
                        f"{OUT_DIR}/: stopped at {name}, the server could not keep more "
                        f"({_reason(exc)})"
                    )
                    failed = "write"
                    break
                copied += len(chunk)
            grew = failed is None and copied == size and _more(src)
        finally:
            os.close(out)
        if failed is not None:
            with contextlib.suppress(OSError):
                os.unlink(target)
            return False
        if grew:
            self.found.skip(f"grew while it was collected: kept its first {size} bytes", name)
        self.found.files.append(
            {"name": name, "size": copied, "sha256": "sha256:" + digest.hexdigest()}
        )
        self.found.size += copied
        return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _more(fd: int) -> bool:
    """True when ``fd`` has a byte past what was read (the file grew)."""
    try:
        return bool(os.read(fd, 1))
    except BlockingIOError:
        return False


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def collect_dir(
    out: int, dest: Path, caps: OutCaps, seen: dict[str, Stamp] | None = None
) -> Collected:
    """Collect the folder open on ``out`` (an fd, which stays open) into ``dest``,
    leaving out the files whose stamp is the one ``seen`` has (the last look's
    :attr:`Collected.stamps`)."""
    return _Walk(dest, caps, seen).run(out)


#: In a bubblewrap run's folder on the host: the FIFO its holder reads, and its pid.
HOLD_FIFO = ".out-hold"
HOLD_PID = ".out-hold.pid"


class OutHold:
    """A bubblewrap run's ``out/``, read after the run through the process that holds it.

    That run's folder is a folder of its stage (a size-capped tmpfs of its own mount
    namespace), which goes with the namespace's last process. The staging shell
    starts a process there that reads :data:`HOLD_FIFO` (the server holds a
    read-write end) and writes its pid and where ``out/`` is into :data:`HOLD_PID`.
    When the run is over, before anything of it is killed, :meth:`grab` opens
    ``out/`` through that process's root (it checks first that this process's stdin
    is the FIFO) and closes the FIFO: the process ends, the open fd keeps the tmpfs
    until :meth:`close`.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        os.mkfifo(workdir / HOLD_FIFO, 0o600)
        self._fifo = os.open(workdir / HOLD_FIFO, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self.fd = -1
        #: Why out/ could not be opened (None: it was, or not tried yet).
        self.failed: str | None = None

    def grab(self) -> None:
        """Open the run's ``out/`` now (once; never raises)."""
        if self._fifo < 0:
            return
        try:
            self.fd = self._open()
        except (OSError, ValueError) as exc:
            self.failed = f"{OUT_DIR}/ could not be reached after the run ({exc})"
        finally:
            os.close(self._fifo)
            self._fifo = -1

    def _open(self) -> int:
        # "PID PATH": PATH is where the stage's out/ is in the holder's mount namespace.
        pid_text, _, path = (self.workdir / HOLD_PID).read_text().strip().partition(" ")
        pid = int(pid_text)
        if not path.startswith("/"):
            raise ValueError(f"{HOLD_PID} names no folder")
        pidfd = os.pidfd_open(pid)
        try:
            fifo = os.fstat(self._fifo)
            stdin = os.stat(f"/proc/{pid}/fd/0")
            if (stdin.st_dev, stdin.st_ino) != (fifo.st_dev, fifo.st_ino):
                raise ValueError(f"process {pid} is not the run's holder")
            fd = os.open(f"/proc/{pid}/root{path}", _DIR_FLAGS)
            if select.select([pidfd], [], [], 0)[0]:  # it ended: /proc/{pid} may be another's
                os.close(fd)
                raise ValueError(f"the run's holder {pid} ended too soon")
            return fd
        finally:
            os.close(pidfd)

    def collect(self, dest: Path, caps: OutCaps) -> Collected:
        """Collect the ``out/`` :meth:`grab` opened into ``dest``, then let go of it
        (blocking: the run's tmpfs may be freed here)."""
        try:
            if self.fd < 0:
                found = Collected()
                found.notes.append(self.failed or f"{OUT_DIR}/ was not reached: nothing kept")
                return found
            return collect_dir(self.fd, dest, caps)
        finally:
            self.close()

    def close(self) -> None:
        """Let go of ``out/`` (and with it of the run's stage); safe to call twice."""
        for name in ("_fifo", "fd"):
            fd = getattr(self, name)
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
                setattr(self, name, -1)


def prepare_out(workdir: Path, launch: Launch) -> None:
    """Make ready the run's empty ``out/``, once ``launch`` is prepared (before it starts).

    A chain that holds its own (its argv names :data:`HOLD_FIFO`) gets its
    :class:`OutHold`; otherwise ``out/`` is made in the run folder on this host, owned
    as the folder is (a root server's landlock run: the run's uid).
    """
    if str(workdir / HOLD_FIFO) in launch.argv:
        launch.out_hold = OutHold(workdir)
    else:
        make_out_dir(workdir)


def collect_run_folder(workdir: Path, dest: Path, caps: OutCaps) -> Collected:
    """Collect ``workdir/out`` (a run folder on this host's disk) into ``dest``."""
    try:
        folder = os.open(workdir, _DIR_FLAGS)
    except OSError as exc:
        return _missing(exc)
    try:
        out = os.open(OUT_DIR, _DIR_FLAGS, dir_fd=folder)
    except OSError as exc:
        return _missing(exc)
    finally:
        os.close(folder)
    try:
        return collect_dir(out, dest, caps)
    finally:
        os.close(out)


def _missing(exc: OSError) -> Collected:
    """What a run whose ``out/`` cannot be opened says."""
    found = Collected()
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        found.notes.append(f"{OUT_DIR}/ is not a folder (a symlink is not followed): nothing kept")
    elif exc.errno != errno.ENOENT:
        found.notes.append(f"{OUT_DIR}/ could not be opened ({_reason(exc)}): nothing kept")
    return found


def make_out_dir(workdir: Path) -> None:
    """Make the empty ``out/`` of a run folder on this host, owned as the folder is."""
    path = workdir / OUT_DIR
    os.mkdir(path, 0o700)
    owner = os.stat(workdir)
    if (owner.st_uid, owner.st_gid) != (os.geteuid(), os.getegid()):
        os.chown(path, owner.st_uid, owner.st_gid, follow_symlinks=False)


async def hand_back(
    request: RunRequest, result: RunResult, workdir: Path, hold: OutHold | None
) -> None:
    """Collect the ended run's ``out/`` (through ``hold``, else ``workdir/out``) into
    ``request.out_dir`` in a worker thread: its files in ``result.files``, what was
    left out in its notes. ``hold`` is let go of either way."""
    dest = request.out_dir
    if dest is None:
        if hold is not None:
            hold.close()  # its holder ends
        return
    # Most runs leave out/ empty: one look on the loop, no worker thread for them (a
    # held out/ is let go of with the run's folder, after the answer: freeing its
    # tmpfs may take a while).
    if hold is not None:
        hold.grab()  # (done already, before the run's processes were killed)
        if hold.fd >= 0 and empty_dir(hold.fd):
            return
        found = await asyncio.to_thread(hold.collect, dest, request.out_caps)
    else:
        if _empty_folder(workdir / OUT_DIR):
            return
        found = await asyncio.to_thread(collect_run_folder, workdir, dest, request.out_caps)
    result.files = found.files
    result.notes += found.notes


def empty_dir(fd: int) -> bool:
    """True when the folder open on ``fd`` has no entry (False when it cannot be read)."""
    try:
        with os.scandir(fd) as entries:
            return next(entries, None) is None
    except OSError:
        return False


def _empty_folder(path: Path) -> bool:
    """True when ``path`` is a folder (not a symlink) with no entry."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        return False  # (missing, or a symlink: the collection says which)
    try:
        return empty_dir(fd)
    finally:
        os.close(fd)
