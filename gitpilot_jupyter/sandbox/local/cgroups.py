"""Per-run cgroups (v1 or v2) for a real memory kill and a process-count limit.

Each run gets a child cgroup beside (v2) or below (v1) the server's own; the
child joins it between fork and exec, so everything it starts is inside. The
cgroup also gives a complete list of the run's processes for the kill, even
those that left the process group.

A server that is not root cannot write its own cgroup, unless it runs in one
delegated to its user (``cgexec``, ``systemd-run --user -p Delegate=yes``): that
is found by itself. An administrator may instead delegate a cgroup the server
is not in and name it by :data:`CGROUP_ENV` (or ``c.SandboxApp.cgroup_parent``):
a path below the root of each hierarchy (``/gitpilot-alice``: on cgroup v1
``/sys/fs/cgroup/memory/gitpilot-alice`` and ``.../pids/gitpilot-alice``), or
without the leading ``/`` below the server's own cgroup in each, whose folder the
user owns. Run cgroups are then made below it. (On cgroup v2 a
process may only be moved within a subtree whose common parent it may write,
so there the server must be inside the delegated cgroup.)
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..backend import ResourceLimits
from .cleanup import owner, owner_gone, start_time

MIB = 1024 * 1024
_KILL_ROUNDS = 20
#: How long a kill ``until_gone`` (before the cgroup is removed) waits for killed
#: processes to finish exiting, looking every millisecond after its first rounds.
_EXIT_WAIT_SEC = 1.0
#: A run cgroup's name: this, then the server's pid and start time, a random part
#: (:func:`run_prefix`).
RUN_PREFIX = "gitpilot-run-"
#: A cgroup delegated to the server's user, below each hierarchy's root, runs are made under.
CGROUP_ENV = "GITPILOT_SANDBOX_CGROUP"
#: The file a run's first process writes ``0`` to, to join a run cgroup, by cgroup version:
#: the calling thread alone on v1 (no global lock, see :meth:`CgroupRun.join_files`), the
#: calling process on v2.
JOIN_FILE = {1: "tasks", 2: "cgroup.procs"}


#: A join that adds more than this (ms) to a process's start waited for the kernel: moving
#: a process into a cgroup takes a global lock whose writer waits for an RCU grace period.
SLOW_JOIN_MS = 3.0
#: What lifts that wait where it applies (cgroup v2: a process moves with its thread group).
SLOW_JOIN_FIX = (
    "mount cgroup2 with favordynmods (Linux 6.0 or newer): "
    "mount -o remount,favordynmods /sys/fs/cgroup, and the same option where it is mounted at boot"
)


def run_prefix(pid: int | None = None) -> str:
    """The start of the names of the run cgroups process ``pid`` (this one) makes:
    :data:`RUN_PREFIX`, its pid and its kernel start time (:func:`.cleanup.owner`),
    each followed by ``-``. Raises ProcessLookupError for a process that is gone.
    """
    pid, started = owner(pid)
    return f"{RUN_PREFIX}{pid}-{started}-"


def _owner_gone(name: str) -> bool:
    """True when the process that made the run cgroup ``name`` no longer runs.

    ``gitpilot-run-<pid>-<start time>-<random>``; a name of an older version has no
    start time (``gitpilot-run-<pid>-<random>``) and goes only when its pid is free.
    """
    parts = name[len(RUN_PREFIX) :].split("-")
    if not parts[0].isdigit():
        return False
    pid = int(parts[0])
    if len(parts) == 2:
        return pid != os.getpid() and start_time(pid) is None
    return owner_gone(pid, parts[1])


def delegated_path(value: str | None) -> str | None:
    """``value`` of :data:`CGROUP_ENV` as a cgroup path: ``/a/b`` from each hierarchy's
    root, ``a/b`` below the server's own cgroup; None when unset.

    Raises ValueError for a path that would leave its hierarchy or cgroup (``..``).
    """
    if value is None or not value.strip():
        return None
    parts = [p for p in value.strip().split("/") if p and p != "."]
    if ".." in parts or not parts:
        raise ValueError(f"{CGROUP_ENV}={value!r} is not a cgroup path such as /gitpilot-alice")
    return ("/" if value.strip().startswith("/") else "") + "/".join(parts)


def _mounts() -> list[tuple[str, str, set[str]]]:
    """``(mount point, fstype, super options)`` of every cgroup mount."""
    found: list[tuple[str, str, set[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(parts) < 5 or len(rparts) < 3 or rparts[0] not in ("cgroup", "cgroup2"):
            continue
        found.append((parts[4], rparts[0], set(rparts[2].split(","))))
    return found


def _own_paths() -> dict[str, str]:
    """Controller (or ``""`` for v2) -> this process's cgroup path."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                paths[name] = path
    return paths


def _try_make(parent: Path) -> str | None:
    """Create and remove a probe child of ``parent``; the error text if that fails."""
    probe = parent / f"gitpilot-probe-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"cannot create a cgroup under {parent}: {exc.strerror or exc}"
    return None


@dataclass
class CgroupTree:
    """Where run cgroups are made: one parent per controller (v1) or one for both (v2)."""

    version: int
    memory_parent: Path | None = None
    pids_parent: Path | None = None

    def layers(self) -> list[str]:
        """``cgroup-memory`` / ``cgroup-pids`` as far as a parent exists for them."""
        out = []
        if self.memory_parent is not None:
            out.append("cgroup-memory")
        if self.pids_parent is not None:
            out.append("cgroup-pids")
        return out

    def still_there(self) -> bool:
        """A cheap re-check that the parents still exist."""
        return all(p.is_dir() for p in (self.memory_parent, self.pids_parent) if p is not None)

    def create(self, limits: ResourceLimits | None) -> CgroupRun:
        """A fresh cgroup for one run with the limits written. Raises OSError.

        ``limits`` None makes a cgroup that limits nothing and only holds the run's
        processes, so all of them can be killed at its end (the ``off`` backend).
        """
        name = f"{run_prefix()}{secrets.token_hex(6)}"
        run = CgroupRun(version=self.version)
        try:
            if self.version == 2:
                parent = self.memory_parent or self.pids_parent
                assert parent is not None
                run.dirs.append(_mkdir(parent / name))
                if self.memory_parent is not None and limits is not None:
                    _write(run.dirs[0] / "memory.max", limits.memory_mb * MIB)
                    _write(run.dirs[0] / "memory.swap.max", 0, optional=True)
                    run.memory_dir = run.dirs[0]
                if self.pids_parent is not None and limits is not None:
                    _write(run.dirs[0] / "pids.max", limits.max_processes)
            else:
                if self.memory_parent is not None and limits is not None:
                    mem = _mkdir(self.memory_parent / name)
                    run.dirs.append(mem)
                    run.memory_dir = mem
                    _write(mem / "memory.limit_in_bytes", limits.memory_mb * MIB)
                    # Without the swap limit the kernel swaps instead of killing.
                    _write(mem / "memory.memsw.limit_in_bytes", limits.memory_mb * MIB, True)
                if self.pids_parent is not None:
                    pids = _mkdir(self.pids_parent / name)
                    run.dirs.append(pids)
                    if limits is not None:
                        _write(pids / "pids.max", limits.max_processes)
            run.open_join_fds()
        except OSError:
            run.cleanup()
            raise
        return run


def join_cost_ms(tree: CgroupTree, shell: str, rounds: int = 5) -> float:
    """What joining a fresh run cgroup adds to a process's start, in ms (median of ``rounds``).

    Timed as a run joins: ``shell`` writes ``0`` to each join file
    (:meth:`CgroupRun.join_files`) and execs ``true``, against the same shell exec'ing
    ``true`` alone, in turn. Raises OSError when a cgroup cannot be made, and
    CalledProcessError (with the shell's message) when a join fails.
    """
    true = shutil.which("true") or "/bin/true"
    script = 'for file do echo 0 >"$file" || exit 1; done; exec "$0"'
    joined: list[float] = []
    alone: list[float] = []
    for _ in range(rounds):
        run = tree.create(None)
        try:
            for files, times in (([str(p) for p in run.join_files()], joined), ([], alone)):
                start = time.perf_counter()
                subprocess.run(
                    [shell, "-c", script, true, *files],
                    capture_output=True,
                    check=True,
                    timeout=10,
                )
                times.append((time.perf_counter() - start) * 1000)
        finally:
            run.kill_all(until_gone=True)
            run.cleanup()
    return max(0.0, statistics.median(joined) - statistics.median(alone))


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def _write(path: Path, value: int, optional: bool = False) -> None:
    if optional and not path.exists():
        return
    path.write_text(str(value))


@dataclass
class CgroupRun:
    """The cgroup(s) of one run: join, kill, OOM check, removal."""

    version: int
    dirs: list[Path] = field(default_factory=list)
    memory_dir: Path | None = None
    _fds: list[int] = field(default_factory=list)
    #: The memory controller's OOM record, opened with the cgroup (-1: none).
    _oom_fd: int = -1

    def open_join_fds(self) -> None:
        """Open the join files now, so the child only has to write to an open fd.

        The OOM record is opened here too, and read at the run's end through this fd:
        the first open of a file in a new cgroup costs ~0.1 ms, which the run's answer
        would otherwise wait for.
        """
        for path in self.join_files():
            self._fds.append(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        if self.memory_dir is not None:
            self._oom_fd = os.open(self.memory_dir / self._oom_file, os.O_RDONLY | os.O_CLOEXEC)

    @property
    def _oom_file(self) -> str:
        return "memory.events" if self.version == 2 else "memory.oom_control"

    def join_files(self) -> list[Path]:
        """The files a single-threaded process writes ``0`` (itself) to, to join the run.

        On cgroup v1 that is ``tasks``: moving only the calling thread takes no global
        lock, where a write to ``cgroup.procs`` (a whole process) first waits for an RCU
        grace period, 10-13 ms here. The joining process is single-threaded (the
        chain's shell, or the child between fork and exec), so that thread is all of it,
        and everything it starts is inside. cgroup v2 moves threads only within a
        threaded subtree, so there it is ``cgroup.procs`` (see :data:`JOIN_FILE`).
        """
        name = JOIN_FILE[self.version]
        return [folder / name for folder in self.dirs]

    def join(self) -> None:
        """Move the calling (single-threaded) process into the run's cgroups; called
        between fork and exec."""
        for fd in self._fds:
            os.write(fd, b"0")

    def join_fds(self) -> list[int]:
        """The open join files (of :meth:`open_join_fds`), for a child started elsewhere."""
        return list(self._fds)

    def close_fds(self) -> None:
        """Close the join fds (the parent needs them only until the child started)."""
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()

    def pids(self) -> set[int]:
        """Every process in the run's cgroups now."""
        found: set[int] = set()
        for folder in self.dirs:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(x) for x in (folder / "cgroup.procs").read_text().split())
        return found

    def kill_all(self, *, until_gone: bool = False) -> None:
        """SIGKILL every process of the run, including any forked during the kill.

        Done once a look finds no process not killed already: a process with SIGKILL
        pending forks no more (the kernel fails a fork that races with it), so nothing
        of the run runs again, though its processes may still be exiting. With
        ``until_gone`` (before the cgroup is removed) it also waits until none is left.
        """
        if self.version == 2 and self.dirs:
            with contextlib.suppress(OSError):
                (self.dirs[0] / "cgroup.kill").write_text("1")
        killed: set[int] = set()
        deadline = time.monotonic() + _EXIT_WAIT_SEC
        rounds = 0
        while True:
            pids = self.pids()
            if not pids or (not until_gone and pids <= killed):
                return
            for pid in pids - killed if not until_gone else pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            killed |= pids
            rounds += 1
            if rounds < _KILL_ROUNDS:
                continue
            if not until_gone or time.monotonic() > deadline:
                return
            # A killed process may take a while to exit (its memory is freed first),
            # and the cgroup cannot be removed while it is there: wait, off the answer.
            time.sleep(0.001)

    def oom_killed(self) -> bool:
        """True when the kernel killed a process of the run for its memory limit."""
        if self.memory_dir is None:
            return False
        try:
            if self._oom_fd >= 0:
                text = os.pread(self._oom_fd, 4096, 0).decode()
            else:
                text = (self.memory_dir / self._oom_file).read_text()
        except OSError:
            return False
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value) > 0
        return False

    def cleanup(self) -> None:
        """Kill what is left and remove the cgroups; a busy one is retried on the next run."""
        self.close_fds()
        if self._oom_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._oom_fd)
            self._oom_fd = -1
        for folder in self.dirs:
            _remove(folder)
        self.dirs.clear()


class SpareRuns:
    """Run cgroups made ahead: at most one per (parents, limits), made off every run's
    path (a run's cleanup after its answer, or a warm slot's start) and taken by the
    next run of those limits, whose ``prepare`` then skips the ``mkdir`` and the limit
    writes of each hierarchy (~0.4 ms). A cgroup made ahead is empty until its run's
    first process joins it, and its OOM record counts from its making: nothing of
    another run is in it. The spares left at exit are removed then.
    """

    #: Limits a spare is kept for; more: the oldest goes.
    KEPT = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[object, CgroupRun] = {}
        self._at_exit = False

    @staticmethod
    def _key(tree: CgroupTree, limits: ResourceLimits) -> object:
        return (tree.version, tree.memory_parent, tree.pids_parent, limits)

    def take(self, tree: CgroupTree, limits: ResourceLimits) -> CgroupRun:
        """A fresh run cgroup of ``limits`` (as :meth:`CgroupTree.create`): the spare
        when one is ready and still there. Raises OSError."""
        with self._lock:
            run = self._ready.pop(self._key(tree, limits), None)
        if run is not None and all(folder.is_dir() for folder in run.dirs):
            return run
        if run is not None:
            run.cleanup()
        return tree.create(limits)

    def make_ahead(self, tree: CgroupTree, limits: ResourceLimits) -> None:
        """Make the spare of ``limits`` unless one is ready (blocking: a worker's)."""
        key = self._key(tree, limits)
        with self._lock:
            if key in self._ready:
                return
        try:
            run = tree.create(limits)
        except OSError:
            return  # the run that needs one makes its own (and says why)
        extra: list[CgroupRun] = [run]
        with self._lock:
            if key not in self._ready:
                if len(self._ready) >= self.KEPT:
                    extra[0] = self._ready.pop(next(iter(self._ready)))
                else:
                    extra.clear()
                self._ready[key] = run
            if not self._at_exit:
                atexit.register(self.close)
                self._at_exit = True
        for left in extra:
            left.cleanup()

    def close(self) -> None:
        """Remove every spare (at exit; tests)."""
        with self._lock:
            ready, self._ready = self._ready, {}
        for run in ready.values():
            run.cleanup()


#: The spare run cgroups of this process's runs.
SPARES = SpareRuns()


_STALE: set[Path] = set()


def _remove(folder: Path) -> None:
    try:
        folder.rmdir()
        _STALE.discard(folder)
    except FileNotFoundError:
        _STALE.discard(folder)
    except OSError:
        _STALE.add(folder)  # a process is still exiting: try again later


def remove_orphans(tree: CgroupTree) -> int:
    """Remove the empty run cgroups of servers that are gone (killed without cleanup).

    A run cgroup is named by its server's pid and start time (:func:`run_prefix`). One
    whose server no longer runs, its pid free or in use by another process, is removed
    if it is empty; a cgroup that still holds processes is left (``rmdir`` refuses it),
    and so is every cgroup of a live server. Only the tree's own parents are looked at.
    How many went.
    """
    removed = 0
    for parent in {p for p in (tree.memory_parent, tree.pids_parent) if p is not None}:
        try:
            names = [e.name for e in os.scandir(parent) if e.name.startswith(RUN_PREFIX)]
        except OSError:
            continue
        for name in names:
            if not _owner_gone(name):
                continue
            with contextlib.suppress(OSError):
                (parent / name).rmdir()
                removed += 1
    return removed


def remove_stale() -> int:
    """Remove run cgroups that were still busy when their run ended; how many still are."""
    for folder in list(_STALE):
        _remove(folder)
    return len(_STALE)


def _v1_parent(controller: str, own: dict[str, str]) -> tuple[Path | None, str | None]:
    for point, fstype, options in _mounts():
        if fstype == "cgroup" and controller in options:
            parent = Path(point + own.get(controller, "/")).resolve()
            if not parent.is_dir():
                return None, f"the {controller} cgroup {parent} does not exist"
            if not os.access(parent, os.W_OK):
                return None, f"the {controller} cgroup {parent} is not writable by this user"
            error = _try_make(parent)
            return (None, error) if error else (parent, None)
    return None, None


def _v2_parent(own: dict[str, str], delegated: bool) -> tuple[Path | None, set[str], str]:
    point = next((p for p, fstype, _ in _mounts() if fstype == "cgroup2"), None)
    if point is None:
        return None, set(), "no cgroup v2 mount"
    path = own.get("", "/")
    base = Path(point + path)
    # A non-root cgroup holding processes cannot have controlled children: use the parent
    # (a delegated one named by the administrator holds none of ours: itself).
    candidates = [base] if path == "/" or delegated else [base.parent]
    reason = "no cgroup with the memory or pids controller delegated to this user"
    for cand in candidates:
        try:
            enabled = set((cand / "cgroup.subtree_control").read_text().split())
        except OSError:
            continue
        wanted = enabled & {"memory", "pids"}
        if not wanted:
            reason = f"{cand} does not enable memory or pids for its children"
            continue
        if not os.access(cand, os.W_OK):
            reason = f"{cand} is not writable by this user"
            continue
        error = _try_make(cand)
        if error:
            reason = error
            continue
        return cand, wanted, ""
    return None, set(), reason


def detect(delegated: str | None = None) -> tuple[CgroupTree | None, list[str]]:
    """The cgroup tree runs can use, or None with the reasons it cannot.

    ``delegated`` (see :func:`delegated_path`): the parent of run cgroups in every
    hierarchy, instead of the server's own cgroup.
    """
    own = _own_paths()
    if delegated is not None:
        own = {
            name: delegated
            if delegated.startswith("/")
            else own.get(name, "/").rstrip("/") + "/" + delegated
            for name in (*own, "memory", "pids", "")
        }
    mem, mem_err = _v1_parent("memory", own)
    pids, pids_err = _v1_parent("pids", own)
    if mem or pids:
        tree = CgroupTree(1, mem, pids)
        error = _probe_join(tree)
        return (None, [error]) if error else (tree, [e for e in (mem_err, pids_err) if e])
    parent, wanted, reason = _v2_parent(own, delegated is not None)
    if parent is None:
        return None, [e for e in (mem_err, pids_err, reason) if e]
    tree = CgroupTree(
        2, parent if "memory" in wanted else None, parent if "pids" in wanted else None
    )
    error = _probe_join(tree)
    return (None, [error]) if error else (tree, [])


def _probe_join(tree: CgroupTree) -> str | None:
    """Start a trivial process inside a fresh run cgroup; the error text if it cannot join."""
    true = shutil.which("true") or "/bin/true"
    try:
        run = tree.create(ResourceLimits())
    except OSError as exc:
        return f"cannot set up a run cgroup: {exc.strerror or exc}"
    try:
        subprocess.run([true], preexec_fn=run.join, check=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"a process cannot join a run cgroup: {exc}"
    finally:
        run.cleanup()
    return None
