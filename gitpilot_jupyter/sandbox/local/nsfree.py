"""The namespace-free engine: a wall for hosts that allow no new namespaces.

In a JupyterHub pod or a ``docker run`` with the default seccomp profile neither
bubblewrap nor ``unshare`` can make a namespace, but Landlock, seccomp and
``no_new_privs`` still work. A run is then walled in by those, all set in the run's
process between fork and exec (:meth:`.wall.Wall.apply`: by the launcher's child for a
cold run, :mod:`.launcher`; by a ``preexec_fn`` for a warm slot), none of which the
snippet can undo:

* **Landlock**, a file-system allowlist: the system folders and the interpreter's
  folders read-only and executable, ``/etc`` but its secrets read-only, a few device
  files, the run's own folder writable; nothing else (no ``$HOME``, no ``/proc``,
  no ``/run``, no ``/tmp``, no Jupyter folder). TCP bind and connect are denied
  (ABI 4), signals and abstract unix sockets are scoped to the run (ABI 6).
* **seccomp**: the bubblewrap engine's deny list, plus ``socket`` for every family
  (network off), ``setsid`` (a run cannot leave its session: the end-of-run kill finds
  every process of it by session id) and namespace flags.
* **no_new_privs**, the rlimits, a session of its own, and a run cgroup where one is
  writable. A root server's runs drop to a uid of their own (:func:`run_ids`).

What it cannot give (no pid namespace, no private ``/tmp``, no size cap on the run's
folder, the server's uid for a server that is not root) is listed by :func:`gaps`,
which status and every plan show before anyone approves.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import signal
import threading
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..records import IsolationGap
from . import idclaims, landlock, prestart, seccomp
from .confine import SECRET_DIRS, SECRET_FILES, SYSTEM_DIRS, inside, needed_paths
from .launchplan import CODE, RUN_STDERR, RUN_STDOUT

#: The engine's name in status, ``debug`` and the launch plan.
ENGINE = "landlock"
#: Device files a run may read and write (nothing else of ``/dev``).
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
#: The uids a root server's runs drop to, one per run under way (none owns a file).
RUN_UID_BASE = 2_100_000_000
RUN_UID_COUNT = 65536
#: The layers a run of this engine has whatever the host (the probe checks them all).
BASE_LAYERS = ["landlock", "fs-allowlist", "no-new-privs", "seccomp", "session-kill"]
FIX = (
    "install bubblewrap where user namespaces are allowed (Debian/Ubuntu: sudo apt-get "
    "install bubblewrap); in a container, the namespace-free engine needs Landlock "
    "(Linux 5.13 or newer, enabled in the kernel's lsm= list) and seccomp"
)


def _ancestors_excluded(path: Path, excluded: Sequence[Path]) -> bool:
    return any(inside(path, e) for e in excluded)


#: What :func:`allowed_under` found, by (roots, excluded): the paths, and each folder it
#: listed with what that folder was (device, inode, mtime: an entry made, removed or
#: renamed in it changes its mtime).
_ALLOWED: dict[object, tuple[list[Path], tuple[tuple[str, object], ...]]] = {}
_ALLOWED_KEPT = 16
#: Every folder :func:`allowed_under` listed (its entries are rules of their own).
_SPLIT: set[str] = set()


def _folder_state(path: str) -> object:
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_mtime_ns)


def allowed_under(roots: Iterable[Path], excluded: Sequence[Path]) -> list[Path]:
    """The paths that give everything below ``roots`` but ``excluded``.

    Landlock only allows (a rule cannot take a subtree back), so a root holding an
    excluded path is replaced by its entries, recursively, down to the excluded
    path's folder. ``roots`` and ``excluded`` are absolute and resolved; what does
    not exist is left out. Kept while every folder it listed is the same (one
    ``stat`` each: ``/etc`` and the few below it that hold a secret).
    """
    return list(_allowed_under(roots, excluded)[0])


def _allowed_under(
    roots: Iterable[Path], excluded: Sequence[Path]
) -> tuple[list[Path], tuple[tuple[str, object], ...]]:
    """:func:`allowed_under`'s paths (not to be changed), and each folder it listed."""
    key = (tuple(sorted(set(roots))), tuple(excluded))
    kept = _ALLOWED.get(key)  # one read: worker threads call this too
    if kept is not None and all(_folder_state(p) == state for p, state in kept[1]):
        return kept
    out: list[Path] = []
    listed: list[tuple[str, object]] = []
    todo = list(key[0])
    while todo:
        path = todo.pop()
        if _ancestors_excluded(path, excluded):
            continue
        if not any(inside(e, path) for e in excluded):
            out.append(path)
            continue
        listed.append((str(path), _folder_state(str(path))))
        _SPLIT.add(str(path))
        with contextlib.suppress(OSError):
            for entry in os.scandir(path):
                child = Path(entry.path)
                if entry.is_symlink():
                    continue  # its target is allowed (or not) by its own path
                todo.append(child)
    out.sort()
    if len(_ALLOWED) >= _ALLOWED_KEPT:
        _ALLOWED.clear()
    found = _ALLOWED[key] = (out, tuple(listed))
    return found


@functools.cache
def _system_roots() -> tuple[tuple[Path, ...], Path | None]:
    """The system folders to execute from (resolved; /bin may be a link to /usr/bin),
    and ``/etc`` (read only)."""
    etc = Path("/etc").resolve() if os.path.isdir("/etc") else None
    roots = {Path(d).resolve() for d in SYSTEM_DIRS if d != "/etc" and os.path.isdir(d)}
    return tuple(sorted(roots)), etc


#: The secrets left out of every rule (as they resolve now: one may be a link).
_SECRETS = (*SECRET_DIRS, *SECRET_FILES)
#: What :func:`fs_rules` found, by (interpreter folders, secrets, hidden paths): the
#: paths to execute and to read, whether the hidden paths stay out, and each folder
#: listed to find them (kept while each is the same, as :func:`allowed_under` does).
_RulesFound = tuple[tuple[str, ...], tuple[str, ...], bool, tuple[tuple[str, object], ...]]
_RULES: dict[object, _RulesFound] = {}


def fs_rules(argv0: str, workdir: Path, hidden: Sequence[Path]) -> tuple[landlock.FsRules, bool]:
    """The run's file-system allowlist, and whether every hidden path stays out of it.

    ``hidden`` are the user's credential and Jupyter folders and files (resolved, see
    :meth:`.layered.LayeredIsolator.hidden_paths`): left out of every tree the run
    sees, as are the system's secrets (:data:`.confine.SECRET_DIRS`, ``SECRET_FILES``).
    False when one of them holds an interpreter folder, which a run cannot do without.
    Worked out again only when a folder listed for it changed (a run's ``prepare``
    otherwise spent ~0.5 ms sorting and converting the same ~165 paths).
    """
    needed = tuple(needed_paths(argv0))
    secrets = tuple(os.path.realpath(p) for p in _SECRETS if os.path.lexists(p))
    key = (needed, secrets, tuple(hidden))
    kept = _RULES.get(key)  # one read: worker threads call this too
    if kept is None or not all(_folder_state(p) == state for p, state in kept[3]):
        kept = _rules_now(needed, secrets, hidden)
        if len(_RULES) >= _ALLOWED_KEPT:
            _RULES.clear()
        _RULES[key] = kept
    execute, read, stays_out, _ = kept
    rules = landlock.FsRules(execute=execute, read=read, write=(str(workdir),), devices=DEVICES)
    return rules, stays_out


def _rules_now(
    needed: Sequence[Path], secrets: Sequence[str], hidden: Sequence[Path]
) -> _RulesFound:
    system, etc = _system_roots()
    interpreters = [p for p in needed if not any(inside(p, s) for s in system)]
    excluded = sorted({*map(Path, secrets), *hidden})
    stays_out = not any(inside(i, h) for i in interpreters for h in hidden)
    execute, listed = _allowed_under([*system, *interpreters], excluded)
    read, listed_read = _allowed_under([etc], excluded) if etc is not None else ([], ())
    return (
        tuple(map(str, execute)),
        tuple(map(str, read)),
        stays_out,
        (*listed, *listed_read),
    )


#: What :func:`_identity` looks at for a set of rules, by (rules, how many folders were
#: split then): the split folders holding some of its paths, and its other paths.
_PROBES: dict[tuple[landlock.FsRules, int], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _probes(rules: landlock.FsRules) -> tuple[tuple[str, ...], tuple[str, ...]]:
    key = (rules, len(_SPLIT))  # (_SPLIT only grows)
    found = _PROBES.get(key)  # one read: worker threads call this too
    if found is None:
        folders: dict[str, None] = {}
        paths: list[str] = []
        for path in (*rules.execute, *rules.read, *rules.devices):
            parent = os.path.dirname(path)
            if parent in _SPLIT:
                folders[parent] = None
            else:
                paths.append(path)
        if len(_PROBES) >= _ALLOWED_KEPT:
            _PROBES.clear()
        found = _PROBES[key] = (tuple(folders), tuple(paths))
    return found


def _identity(rules: landlock.FsRules) -> tuple[object, ...]:
    """Which folder or file each path of ``rules`` is now (device, inode; None: gone).

    An entry of a folder :func:`allowed_under` split (~140 of ``/etc``) is named by
    that folder's state instead (device, inode, mtime: an entry made, removed,
    renamed or replaced in it, an atomic save, changes the folder's mtime): one
    ``stat`` for all of them, where one each took most of a run's ``prepare``. Which
    paths are such entries is worked out once per set of rules (:func:`_probes`: the
    ~170 ``dirname`` calls were most of the 0.15 ms this took on a run's path).
    """
    folders, paths = _probes(rules)
    seen: list[object] = [("in", folder, _folder_state(folder)) for folder in folders]
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            seen.append(None)
        else:
            seen.append((info.st_dev, info.st_ino))
    return tuple(seen)


def wall_fingerprint(argv0: str, hidden: Sequence[Path]) -> Hashable:
    """What a run's wall of ``argv0`` would be made of now, whatever its run folder:
    the hidden paths, the rules' paths (hidden ones and secrets left out, the
    interpreter's folders in) and which folder or file each is (a rule holds the one
    it opened: one replaced since, an atomic save, is not the one a slot's wall allows)."""
    rules, kept = fs_rules(argv0, Path("/"), hidden)
    return (
        tuple(map(str, hidden)),
        rules.execute,
        rules.read,
        kept,
        landlock.abi(),
        _identity(rules),
    )


#: A slot's prestart hook folder, in its run folder (this engine has no private /tmp).
PRESTART_DIR = ".gitpilot-prestart"


def slot_argv(argv: Sequence[str], *, prestarted: bool, env: Mapping[str, str]) -> list[str]:
    """A warm slot's command: a shell that waits for the code, then execs ``argv``.

    ``argv`` is the cold run's (its last word the snippet's file), ``env`` its environment.
    Pre-started (:mod:`.prestart`), the shell opens the code FIFO on
    :data:`.launchplan.CODE` (then removes its name) and the run's stdout and stderr
    on :data:`.launchplan.RUN_STDOUT` and ``RUN_STDERR``, and execs the interpreter,
    which waits in its
    hook. Otherwise the snippet file is the FIFO: ``cat`` copies the code out of it to
    its end and the copy is renamed over the FIFO before the interpreter starts on it,
    as bubblewrap's ``--file`` does. The run sees what a cold run sees: the shell's
    ``PWD`` goes unless ``env`` had one. All of it runs behind the run's wall (the
    shell, ``cat``, ``rm`` and ``mv`` are system programs).
    """
    steps = [] if "PWD" in env else ["unset PWD"]
    if prestarted:
        code, out, err = (fd.number for fd in (CODE, RUN_STDOUT, RUN_STDERR))
        steps += [
            f"exec {code}<{prestart.CODE_FIFO} {out}>&1 {err}>&2",
            f"rm -f {prestart.CODE_FIFO}",
        ]
    else:
        snippet = f'"${{{len(argv)}}}"'  # the last word: the snippet's file
        steps += [f"cat <{snippet} >.code.part", f"mv -f .code.part {snippet}"]
    return ["/bin/sh", "-c", " && ".join([*steps, 'exec "$@"']), "sh", *argv]


def own_slot_files(workdir: Path) -> None:
    """Give a slot's files (its FIFO, the prestart hook) to the run folder's owner: a
    root server's slot waits as the run's uid, which must open them."""
    owner = os.stat(workdir).st_uid
    if owner == os.geteuid():
        return
    for top, dirs, files in os.walk(workdir):
        for name in (*dirs, *files):
            os.chown(os.path.join(top, name), owner, owner, follow_symlinks=False)


class _Spares:
    """Per wall, one ruleset with every rule of a run but its folder, built ahead.

    Building a run's ruleset is one ``open``, ``fstat``, ``readlink`` and
    ``landlock_add_rule`` per path (~150 with ``/etc`` split around its secrets:
    ~2-3 ms of Python per run). A run takes the spare of its wall, adds its own
    folder (one rule) and uses it once; its cleanup, after its answer (in the
    backend's worker thread), builds the next (:meth:`make_ahead`): nothing of it
    competes with a run's start for the GIL or a core. A warm slot's start takes one
    too and builds the next at once (in its worker): else a cold run beside a pool
    found none. A spare is used only while
    every path of it is still the folder or file it opened (one ``stat`` each), as a
    ruleset built now would be; otherwise the run builds its own.
    """

    #: Walls (interpreter, network) a spare is kept for; more: the oldest is closed.
    KEPT = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ready: dict[object, tuple[int, tuple[object, ...]]] = {}

    @staticmethod
    def _key(rules: landlock.FsRules, deny_tcp: bool, scoped: bool) -> _SpareKey:
        base = landlock.FsRules(execute=rules.execute, read=rules.read, devices=rules.devices)
        return (base, deny_tcp, scoped)

    def ruleset(self, rules: landlock.FsRules, *, deny_tcp: bool, scoped: bool) -> int:
        """A ruleset fd allowing ``rules`` (as :func:`.landlock.ruleset`), from a spare
        when one is current."""
        key = self._key(rules, deny_tcp, scoped)
        with self._lock:
            spare = self._ready.pop(key, None)
        if spare is not None and _identity(key[0]) != spare[1]:
            os.close(spare[0])
            spare = None
        if spare is None:
            return landlock.ruleset(rules, deny_tcp=deny_tcp, scoped=scoped)
        try:
            landlock.add_rules(spare[0], landlock.FsRules(write=rules.write))
        except BaseException:
            os.close(spare[0])
            raise
        return spare[0]

    def make_ahead(self, rules: landlock.FsRules, *, deny_tcp: bool, scoped: bool) -> None:
        """Build the spare of ``rules``' wall unless one is ready (blocking: a worker's)."""
        key = self._key(rules, deny_tcp, scoped)
        with self._lock:
            if key in self._ready:
                return
        base, _, _ = key
        try:
            seen = _identity(base)
            fd = landlock.ruleset(base, deny_tcp=deny_tcp, scoped=scoped)
        except (OSError, ValueError):
            return  # the run that needs it builds its own (and says why)
        with self._lock:
            if key in self._ready:  # another run's cleanup was first
                os.close(fd)
                return
            if len(self._ready) >= self.KEPT:
                os.close(self._ready.pop(next(iter(self._ready)))[0])
            self._ready[key] = (fd, seen)

    def close(self) -> None:
        """Close every spare (tests; a server's spares live as long as it does)."""
        with self._lock:
            ready, self._ready = self._ready, {}
        for fd, _ in ready.values():
            with contextlib.suppress(OSError):
                os.close(fd)


_SpareKey = tuple[landlock.FsRules, bool, bool]


#: The spare rulesets of this process's runs.
SPARES = _Spares()


class _RunIds:
    """The uids a root server's runs drop to: one free uid per run under way, on this
    host (claimed in root's claim folder, :mod:`.idclaims`, so two root servers never
    hand one uid to two runs)."""

    def __init__(self, folder: Path | None = None) -> None:
        self._lock = threading.Lock()
        self._taken: dict[int, int | None] = {}  # uid -> its claim's fd (None: this process only)
        self._next = itertools.cycle(range(RUN_UID_COUNT))
        self.folder = folder
        self._shared: bool | None = None

    def _claim(self, uid: int) -> tuple[bool, int | None]:
        """(free, fd): free when no other server's run holds ``uid``."""
        if self._shared is None:
            if self.folder is None:
                self.folder = idclaims.claim_folder()
            self._shared = idclaims.private_folder(self.folder)
        if not self._shared:
            return True, None
        assert self.folder is not None
        fd = idclaims.lock_id(self.folder, f"root-{uid}")
        return fd is not None, fd

    def take(self) -> int:
        with self._lock:
            for _ in range(RUN_UID_COUNT):
                uid = RUN_UID_BASE + next(self._next)
                if uid in self._taken:
                    continue
                free, fd = self._claim(uid)
                if free:
                    self._taken[uid] = fd
                    return uid
        raise OSError("every run uid is in use")

    def give_back(self, uid: int) -> None:
        with self._lock:
            fd = self._taken.pop(uid, None)
        if fd is not None:
            os.close(fd)  # (the lock goes with its last fd)


RUN_IDS = _RunIds()


def own_run_folder(workdir: Path, uid: int) -> None:
    """Give the run folder to the run's own uid (a root server's run writes there as it).

    The server made it (0700) and stays able to remove it; the run enters it as its
    working folder before it drops to ``uid``.
    """
    os.chown(workdir, uid, uid)


def session_members(sid: int) -> list[int]:
    """Every process whose session is ``sid`` (a run's, which it cannot leave: setsid
    is refused to it), by ``getsid`` on each process of ``/proc``. The kernel keeps a
    session's number from being given to a new process while any member lives, so
    nothing else matches.

    One ``getsid`` per process (it runs before every answer of this engine, on the
    event loop): reading each ``/proc/PID/stat`` took three syscalls and a parse, ten
    times as long on a host with a few hundred processes.
    """
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                if os.getsid(pid) == sid:
                    found.append(pid)
            except OSError:
                continue  # it ended meanwhile
    return found


def kill_session(sid: int) -> None:
    """SIGKILL every process of session ``sid`` until none is left (a few rounds: one
    may fork while the list is read)."""
    for _ in range(20):
        members = session_members(sid)
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def layers(*, allow_network: bool, as_root: bool) -> list[str]:
    """The layers a run of this engine gets (before cgroups and rlimits)."""
    out = list(BASE_LAYERS)
    out.insert(2, "hidden-credentials")
    if not allow_network:
        out.append("net-denied")
    if landlock.abi() >= 6:
        out.append("signal-scope")
    out.append("non-root")
    if as_root:
        out.append("own-uid")
    return out


def gaps(*, as_root: bool) -> list[IsolationGap]:
    """What this engine cannot keep from a run, each with its reason and fix."""
    out: list[IsolationGap] = [
        {
            "layer": "pidns",
            "reason": "no pid namespace: other processes run beside the snippet ("
            "/proc is out of its view"
            + (", signals to them are refused" if landlock.abi() >= 6 else "")
            + ")",
            "fix": FIX,
        },
        {
            "layer": "private-tmp",
            "reason": "no private /tmp: /tmp and /dev/shm are out of the snippet's reach "
            "(TMPDIR points into its own folder)",
            "fix": FIX,
        },
        {
            "layer": "disk-cap",
            "reason": "the run's folder is on the host's disk: each file is capped "
            "(RLIMIT_FSIZE), their total is not",
            "fix": FIX,
        },
    ]
    if landlock.abi() < 6:
        out.append(
            {
                "layer": "signal-scope",
                "reason": f"Landlock ABI {landlock.abi()} (below 6) cannot scope signals "
                "and abstract unix sockets: a snippet may signal the server's processes",
                "fix": "a kernel with Landlock ABI 6 (Linux 6.12 or newer)",
            }
        )
    if not as_root:
        out.append(
            {
                "layer": "own-uid",
                "reason": "runs have the server's own uid (no user namespace, and only root "
                "may give them another): per-user limits are shared with the server",
                "fix": FIX,
            }
        )
    return out


@dataclass(frozen=True)
class Engine:
    """A working namespace-free engine: its seccomp filters, by network."""

    bpf_off: bytes
    bpf_inet: bytes | None

    @property
    def kind(self) -> str:
        """The engine's name (``landlock``)."""
        return ENGINE


def _unavailable(reason: str) -> IsolationGap:
    return {"layer": ENGINE, "reason": reason, "fix": FIX}


@functools.cache
def detect() -> tuple[Engine | None, IsolationGap | None]:
    """The engine when Landlock and the seccomp filter work here (checked by effect,
    once per process), else None and why not."""
    if landlock.abi() < 1:
        return None, _unavailable("Landlock is not available in this kernel (or is disabled)")
    bpf, why = seccomp.compiled_namespace_free(allow_inet=False)
    if bpf is None:
        return None, {"layer": ENGINE, "reason": str(why), "fix": seccomp.FIX}
    inet, _ = seccomp.compiled_namespace_free(allow_inet=True)
    failed = landlock.probe() or _probe_as_runs()
    if failed is not None:
        return None, _unavailable(failed)
    return Engine(bpf, inet), None


def _probe_as_runs() -> str | None:
    """None when this server's interpreter starts behind a full run's wall, as a run's
    uid (a root server's runs drop to one: an interpreter under a folder only root may
    enter, such as a pyenv in /root, cannot start there)."""
    import sys
    import tempfile

    bpf, why = seccomp.compiled_namespace_free(allow_inet=False)
    if bpf is None:
        return str(why)
    with tempfile.TemporaryDirectory(prefix="gitpilot-landlock-") as top:
        workdir = Path(top)
        rules, _ = fs_rules(sys.executable, workdir, [])
        uid = RUN_UID_BASE + RUN_UID_COUNT - 1 if os.geteuid() == 0 else None
        if uid is not None:
            own_run_folder(workdir, uid)
        wall = landlock.Wall(
            landlock.ruleset(rules, deny_tcp=True, scoped=True),
            bpf=bpf,
            ids=(uid, uid) if uid is not None else None,
        )
        try:
            argv = [sys.executable, "-I", "-c", "open('ok', 'w').write('ok')"]
            done, reason = landlock.run_walled(wall, argv, cwd=str(workdir))
        finally:
            wall.close()
        who = f" as uid {uid}" if uid is not None else ""
        if done is None or done.returncode != 0 or not (workdir / "ok").is_file():
            why = reason if done is None else f"exit {done.returncode}: {done.stderr[-300:]}"
            return (
                f"the interpreter {sys.executable} does not start behind the wall{who} "
                f"({why.strip()})"
                + ("; a root server's runs need an interpreter every user may enter" * bool(who))
            )
    return None
