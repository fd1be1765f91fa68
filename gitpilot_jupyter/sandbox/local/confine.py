"""The bubblewrap confinement of a run: who it runs as, what it sees, where it writes.

A run is started through this chain (each step ``exec``s the next, so the
namespace tool is still the server's direct child)::

    unshare --mount [--user --map-...]         a private mount namespace for the run
      sh -c chain/stage.sh OPTIONS              joins the run cgroup and sets the
                                                rlimits (``first``, see .layered),
                                                mounts the run's size-capped tmpfs,
                                                stages interpreter folders; then
      setpriv --reuid --regid --clear-groups    drops to an unprivileged uid, no groups
        bwrap --unshare-user ... --seccomp 3    a fresh read-only root holding only
                                                system folders and the interpreter
          interpreter snippet                   uid != 0, no capabilities, filtered

As root, ``setpriv`` drops to a uid of the run's own (:data:`.nsfree.RUN_IDS`). A
server that is not root first makes a user namespace whose maps
``newuidmap``/``newgidmap`` write (:class:`IdMap`): its own uid is root there and
``nobody`` is a host id of its subordinate range (``/etc/subuid``, ``/etc/subgid``)
that no other run has (:mod:`.subids`). Such a namespace allows ``setgroups``, so
``setpriv`` clears the supplementary groups (``docker``!) the kernel would
otherwise keep, and the snippet is a host uid that owns no file. Without
``newuidmap`` or a range, the namespace is ``--map-root-user`` (no ``setgroups``):
bwrap maps the run to ``nobody`` in a nested one, the groups stay, and
:func:`unavailable` says so.

The writable space (the run folder, ``/tmp``, ``/dev/shm``) is one tmpfs with a
size and an inode cap, mounted in the run's own mount namespace: it vanishes
with the run's last process, so nothing a snippet writes reaches the host disk
and nothing is left to clean. As root, folders the unprivileged uid cannot
reach (a pyenv or venv under ``/root``, which is 0700) are bind-mounted into
the staging tmpfs first, and bound back read-only at their own path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import seccomp
from .lookup import Lookup

#: System folders a run sees read-only (those that exist; a symlink stays a symlink).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Files under a system folder no snippet may read (covered by an empty file).
SECRET_FILES = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
    "/etc/machine-id",
)
#: Folders under a system folder no snippet may read (covered by an empty folder).
SECRET_DIRS = ("/etc/ssh", "/etc/ssl/private", "/etc/sudoers.d", "/etc/docker", "/etc/gitpilot")
#: The account a run uses when the server is root: no files, no groups, no login.
SANDBOX_USER = "nobody"
#: True when this kernel has cgroup namespaces (a run then gets one of its own).
CGROUP_NS = os.path.exists("/proc/self/ns/cgroup")
#: The folders a bwrap run gets empty and its own (``/var/tmp`` is a link to its ``/tmp``).
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
#: Where a run sees an interpreter folder that lies in one of :data:`PRIVATE_DIRS` on the
#: host (a checkout's venv under ``/tmp``), below it at its host path: bound there, its
#: private folder stays empty.
RELOCATED = "/run/gitpilot-interpreters"
TOOLS_FIX = "install util-linux (it provides unshare and setpriv)"
#: Where shadow's newuidmap/newgidmap look up the ranges a user may map.
SUBUID_FILE = "/etc/subuid"
SUBGID_FILE = "/etc/subgid"
#: The size of the subordinate range the fixes suggest (what useradd gives a new user).
SUBID_COUNT = 65536
#: How an administrator gives network-on runs their egress-only network.
NET_FIX = (
    "install slirp4netns (Debian/Ubuntu: sudo apt-get install slirp4netns) and make "
    "/dev/net/tun usable by the server's user (mode 0666, the default)"
)


def sandbox_ids() -> tuple[int, int]:
    """The uid and gid a run drops to when the server is root (``nobody``, else 65534)."""
    try:
        entry = pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        return 65534, 65534
    return entry.pw_uid, entry.pw_gid


def jupyter_dirs(environ: Mapping[str, str]) -> list[Path]:
    """Every Jupyter config, data and runtime folder, wherever ``JUPYTER_*`` points."""
    found: list[Path] = []
    for name in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR"):
        if environ.get(name):
            found.append(Path(environ[name]).expanduser())
    for name in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH"):
        found += [Path(p).expanduser() for p in environ.get(name, "").split(os.pathsep) if p]
    if environ is os.environ:
        try:
            from jupyter_core import paths

            found += [Path(p) for p in paths.jupyter_config_path()]
            found += [Path(p) for p in paths.jupyter_path()]
            found.append(Path(paths.jupyter_runtime_dir()))
        except ImportError:
            pass
    return found


def needed_paths(argv0: str) -> list[Path]:
    """Folders a run cannot do without: the interpreter and the Python installation."""
    return list(_needed_paths(argv0, os.environ.get("PATH")))


@functools.lru_cache(maxsize=64)
def _needed_paths(argv0: str, search: str | None) -> tuple[Path, ...]:
    # Per interpreter (and PATH): resolved once, not per run. A folder that vanished
    # later makes bubblewrap fail the run, so nothing is left unchecked.
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent}
    exe = shutil.which(argv0, path=search) or argv0
    paths.add(Path(exe).parent)
    paths.add(Path(exe).resolve().parent)
    return tuple(sorted(p.resolve() for p in paths if p.is_dir()))


def inside(path: Path, folder: Path) -> bool:
    """True when ``path`` is ``folder`` or below it (both absolute and resolved)."""
    parts = folder.parts
    return path.parts[: len(parts)] == parts


def relocated(folder: Path) -> Path:
    """Where a run sees interpreter folder ``folder``: at its own path, or below
    :data:`RELOCATED` when it lies in one of :data:`PRIVATE_DIRS`."""
    if any(inside(folder, Path(private)) for private in PRIVATE_DIRS):
        return Path(RELOCATED + str(folder))
    return folder


def seen_at(path: Path, interpreters: Sequence[Path]) -> Path:
    """Where a run sees ``path`` of the host: below its interpreter folder's
    :func:`relocated` place when it lies in one, else at its own path."""
    for folder in interpreters:
        if inside(path, folder):
            return relocated(folder) / path.relative_to(folder)
    return path


def relocated_command(argv: Sequence[str], interpreters: Sequence[Path]) -> list[str]:
    """``argv`` with its program at the path the run sees it at (see :func:`seen_at`)."""
    if not argv:
        return list(argv)
    return [str(seen_at(Path(argv[0]), interpreters)), *argv[1:]]


@functools.cache
def _system_trees() -> list[Path]:
    return [Path(d).resolve() for d in SYSTEM_DIRS if os.path.isdir(d)]


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """``paths`` without those inside another one of them."""
    ordered = sorted(set(paths), key=lambda p: len(p.parts))
    kept: list[Path] = []
    for path in ordered:
        if not any(inside(path, k) for k in kept):
            kept.append(path)
    return sorted(kept)


@dataclass(frozen=True)
class IdMap:
    """A non-root server's subordinate ranges: the host ids its runs become.

    The run's user namespace maps the server's uid and gid to 0 (the staging shell)
    and :func:`sandbox_ids` to a pair of host ids of the ranges, written by
    ``newuidmap`` and ``newgidmap``, which allow ``setgroups`` in it. ``uid`` and
    ``gid`` are the ranges' last ids (the probes'); each run claims a pair of its own
    below them (:mod:`.subids`).
    """

    uid: int
    gid: int
    #: How many ids each range has (the smaller of the two).
    count: int = 1

    def unshare_options(
        self, inner: tuple[int, int], host: tuple[int, int] | None = None
    ) -> list[str]:
        """The ``unshare`` (util-linux 2.38+) options that make that user namespace,
        with ``inner`` (:func:`sandbox_ids`) the ids the run drops to in it, which are
        ``host`` (default: the ranges' last ids) on the host."""
        inner_uid, inner_gid = inner
        uid, gid = host if host is not None else (self.uid, self.gid)
        return [
            "--user",
            "--map-user=0",
            "--map-group=0",
            f"--map-users={uid},{inner_uid},1",
            f"--map-groups={gid},{inner_gid},1",
        ]


def subordinate_range(path: str, name: str, uid: int) -> tuple[int, int] | None:
    """The first ``(start, count)`` of ``name`` (or ``uid``) in a subuid/subgid file."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.strip().split(":")
        if len(fields) == 3 and fields[0] in (name, str(uid)):
            with contextlib.suppress(ValueError):
                start, count = int(fields[1]), int(fields[2])
                if start > 0 and count > 0:
                    return start, count
    return None


def free_subordinate_start(paths: Sequence[str] = (SUBUID_FILE, SUBGID_FILE)) -> int:
    """A start no range in ``paths`` uses (after the last one, at least 100000)."""
    end = 100000
    for path in paths:
        with contextlib.suppress(OSError):
            for line in Path(path).read_text().splitlines():
                fields = line.strip().split(":")
                with contextlib.suppress(ValueError, IndexError):
                    end = max(end, int(fields[1]) + int(fields[2]))
    return end


@functools.cache
def _maps_ids(unshare: str) -> bool:
    """True when this ``unshare`` has ``--map-users`` (util-linux 2.38 and newer)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run([unshare, "--help"], capture_output=True, text=True, timeout=10)
        return "--map-users" in done.stdout
    return False


def id_map(unshare: str) -> tuple[IdMap | None, str | None]:
    """The ids a non-root server's runs can drop to, or None and what is missing."""
    uid = os.geteuid()
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        name = str(uid)
    missing = [tool for tool in ("newuidmap", "newgidmap") if shutil.which(tool) is None]
    if missing:
        return None, f"{' and '.join(missing)} (package uidmap) is not installed"
    if not _maps_ids(unshare):
        return None, f"{unshare} has no --map-users (util-linux 2.38 or newer is needed)"
    users = subordinate_range(SUBUID_FILE, name, uid)
    groups = subordinate_range(SUBGID_FILE, name, uid)
    if users is None or groups is None:
        absent = [f for f, r in ((SUBUID_FILE, users), (SUBGID_FILE, groups)) if r is None]
        return None, f"the user {name} has no subordinate range in {' or '.join(absent)}"
    return IdMap(sum(users) - 1, sum(groups) - 1, min(users[1], groups[1])), None


def groups_fix(name: str | None = None) -> str:
    """How an administrator lets a non-root server's runs drop their groups."""
    if name is None:
        try:
            name = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            name = str(os.geteuid())
    start = free_subordinate_start()
    end = start + SUBID_COUNT - 1
    return (
        "install uidmap (Debian/Ubuntu: sudo apt-get install uidmap; it provides newuidmap "
        "and newgidmap) and give the server's user a subordinate id range: "
        f"sudo usermod --add-subuids {start}-{end} --add-subgids {start}-{end} {name}; "
        "then restart the server (or take the user out of groups such as docker)"
    )


@dataclass
class View:
    """What a run sees: system folders, interpreter folders, covered secrets."""

    interpreters: list[Path]
    cover_dirs: list[Path] = field(default_factory=list)
    cover_files: list[Path] = field(default_factory=list)
    #: Hidden paths that hold an interpreter folder and so stay visible.
    kept: list[Path] = field(default_factory=list)


def plan_view(
    argv: Sequence[str],
    hidden: tuple[Sequence[Path], Sequence[Path]],
    lookup: Lookup | None = None,
    needed: Sequence[Path] | None = None,
) -> View:
    """The view for ``argv``: which interpreter folders to add, which secrets to cover.

    ``hidden`` is (folders, files) the user's credentials and Jupyter's files live in.
    A hidden path outside every visible tree needs no cover; one holding an
    interpreter folder cannot be covered and is reported in ``kept``. Which of them
    and of the system's secrets exist, and where they resolve to, is looked at anew
    through ``lookup`` (a new one by default; see :meth:`LayeredIsolator.host_view`).
    ``needed``: :func:`needed_paths` of ``argv[0]`` when the caller has them already.
    """
    system = _system_trees()
    if needed is None:
        needed = needed_paths(argv[0]) if argv else []
    extra = [p for p in needed if not any(inside(p, s) for s in system)]
    interpreters = _outermost(extra)
    visible = system + interpreters
    view = View(interpreters)
    lookup = Lookup() if lookup is None else lookup
    dirs = [*map(str, hidden[0]), *SECRET_DIRS]
    files = [*map(str, hidden[1]), *SECRET_FILES]
    for folder in _outermost(map(Path, lookup.folders(dirs))):
        if any(inside(i, folder) for i in interpreters):
            view.kept.append(folder)
        elif any(inside(folder, v) for v in visible):
            view.cover_dirs.append(folder)
    for file in sorted(map(Path, lookup.files(files))):
        if any(inside(file, v) for v in visible) and not any(
            inside(file, d) for d in view.cover_dirs
        ):
            view.cover_files.append(file)
    return view


@dataclass
class Confinement:
    """The launch chain of one bwrap run: its tools and ids (see the module docstring;
    its launch plan: :mod:`.bwrapplan`)."""

    bwrap: str
    unshare: str
    setpriv: str | None  # None: no uid to drop to (a non-root server without an IdMap)
    shell: str = "/bin/sh"
    #: User-mode networking for network-on runs (slirp4netns, nsenter, ip); None: not here.
    net_tools: tuple[str, str, str] | None = None
    #: A non-root server's user namespace through newuidmap/newgidmap (None: root, or none).
    idmap: IdMap | None = None
    #: Why runs keep the server's supplementary groups (None: they drop them).
    groups_gap: str | None = None

    @property
    def as_root(self) -> bool:
        """True when the server is root (its runs drop to ``nobody`` of the host)."""
        return self.setpriv is not None and self.idmap is None

    @property
    def drops(self) -> bool:
        """True when a run drops to an unprivileged uid with no supplementary groups."""
        return self.setpriv is not None

    def run_ids(self) -> tuple[int, int]:
        """The host uid and gid a run has (as the host's ``/proc`` shows them); with a
        drop, those of a run given no ids of its own (``own_ids`` of :func:`.bwrapplan.command`:
        a probe's)."""
        if self.idmap is not None:
            return self.idmap.uid, self.idmap.gid
        if self.as_root:
            return sandbox_ids()
        return os.geteuid(), os.getegid()


def confinement(bwrap: str) -> tuple[Confinement | None, str | None]:
    """The chain for this server, or None and what is missing."""
    unshare = shutil.which("unshare")
    setpriv = shutil.which("setpriv")
    if unshare is None:
        return None, "unshare (util-linux) is not installed"
    slirp, nsenter, ip = (shutil.which(t) for t in ("slirp4netns", "nsenter", "ip"))
    net_tools = (slirp, nsenter, ip) if slirp and nsenter and ip else None
    if os.geteuid() == 0:
        if setpriv is None:
            return None, "setpriv (util-linux) is not installed: a run would stay root"
        return Confinement(bwrap, unshare, setpriv, net_tools=net_tools), None
    idmap, why = id_map(unshare) if setpriv is not None else (None, TOOLS_FIX)
    if idmap is not None:
        return Confinement(bwrap, unshare, setpriv, net_tools=net_tools, idmap=idmap), None
    return Confinement(bwrap, unshare, None, net_tools=net_tools, groups_gap=why), None


def without_idmap(chain: Confinement, why: str) -> Confinement:
    """``chain`` without its user namespace through newuidmap (which failed: ``why``)."""
    return dataclasses.replace(chain, setpriv=None, idmap=None, groups_gap=why)


def unavailable(chain: Confinement | None, egress_error: str | None) -> list[dict[str, str]]:
    """The layers of a bwrap run this host cannot give, each with its reason and fix."""
    out: list[dict[str, str]] = []
    if chain is not None and not chain.drops:
        out.append(
            {
                "layer": "no-groups",
                "reason": "the server is not root and its runs cannot get a user namespace "
                f"that may drop groups ({chain.groups_gap}): a run keeps the server's uid "
                "and its supplementary groups (e.g. docker). Their sockets stay out of reach "
                "only because /run, /var/run and $HOME are not in its view",
                "fix": groups_fix(),
            }
        )
        out.append(own_uid_gap(chain))
    bpf, why = seccomp_filter()
    if bpf is None:
        out.append({"layer": "seccomp", "reason": str(why), "fix": seccomp.FIX})
    if egress_error is not None:
        out.append(
            {
                "layer": "egress-only",
                "reason": "network-on runs are refused: they would share the host's network "
                f"(its loopback, the Jupyter API, its services): {egress_error}",
                "fix": NET_FIX,
            }
        )
    return out


def own_uid_gap(chain: Confinement) -> dict[str, str]:
    """Why the runs of ``chain`` (a non-root server's without an :class:`IdMap`) share
    one host uid, and how an administrator gives each its own."""
    return {
        "layer": "own-uid",
        "reason": "every run has the server's own uid (no subordinate id range to map runs "
        f"to: {chain.groups_gap}): the kernel's per-user accounting (pipe buffers, epoll "
        "watches, locked memory, keys) is shared by all runs and the server",
        "fix": groups_fix(),
    }


def seccomp_filter() -> tuple[bytes | None, str | None]:
    """The compiled filter, or None and why there is none."""
    return seccomp.compiled()
