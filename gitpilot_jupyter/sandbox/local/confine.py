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
import ipaddress
import itertools
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import launchplan, prestart, seccomp
from .launchplan import LaunchPlan
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
#: Inodes of the writable space per MiB of its size (256 MiB: 16,384 files and folders).
INODES_PER_MB = 64
#: Where the run's private, size-capped writable space is mounted, inside the run folder.
STAGE = "stage"
#: The folders a bwrap run gets empty and its own (``/var/tmp`` is a link to its ``/tmp``).
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm")
#: Where a run sees an interpreter folder that lies in one of :data:`PRIVATE_DIRS` on the
#: host (a checkout's venv under ``/tmp``), below it at its host path: bound there, its
#: private folder stays empty.
RELOCATED = "/run/gitpilot-interpreters"
SECCOMP_FILE = ".seccomp.bpf"
#: Where the run's stage is mounted in its own mount namespace when the run drops its
#: uid (folders anyone can enter): the first that holds no interpreter folder to stage.
STAGE_TARGETS = ("/tmp", "/var/tmp", "/mnt")
#: The run's mounts of its stage, one fstab line each (see :meth:`Confinement.command`).
FSTAB_FILE = ".stage.fstab"
#: The read-only, empty tmpfs hidden folders are covered with (one inode: nothing fits).
EMPTY_OPTIONS = "ro,size=4k,nr_inodes=1,mode=0755,nosuid,nodev,noexec,X-mount.mkdir"
TOOLS_FIX = "install util-linux (it provides unshare and setpriv)"
#: Where shadow's newuidmap/newgidmap look up the ranges a user may map.
SUBUID_FILE = "/etc/subuid"
SUBGID_FILE = "/etc/subgid"
#: The size of the subordinate range the fixes suggest (what useradd gives a new user).
SUBID_COUNT = 65536


#: The networks around a host that egress to the world must not reach whatever the host
#: looks like: private and shared ranges (a LAN, a container's or a pod's host, the other
#: pods, a Dask scheduler on another machine) and link-local (cloud metadata).
AROUND_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")
NET_FIX = (
    "install slirp4netns (Debian/Ubuntu: sudo apt-get install slirp4netns) and make "
    "/dev/net/tun usable by the server's user (mode 0666, the default)"
)


#: Networks this process's network-on runs must not reach besides those around the host:
#: what a backend serving others adds (a batch worker: its Dask cluster's machines).
_ALSO_BLOCKED: set[str] = set()


def block_also(networks: Iterable[str]) -> None:
    """Keep every later network-on run of this process from ``networks`` too (IPv4 CIDRs;
    the egress-only network has no IPv6 route, and no way to the host's loopback)."""
    for network in networks:
        net = ipaddress.ip_network(network, strict=False)
        if isinstance(net, ipaddress.IPv4Network) and not net.is_loopback:
            _ALSO_BLOCKED.add(str(net))


def blocked_networks() -> list[str]:
    """What a network-on run must not reach: :data:`AROUND_RANGES`, every address of this
    host, the subnet of every route it has but the default one (bridges and links of any
    name: containers, VMs), the default gateway itself, and what :func:`block_also` added."""
    out = set(AROUND_RANGES) | _ALSO_BLOCKED
    with contextlib.suppress(OSError):
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for before, line in itertools.pairwise(lines):
            if "/32 host LOCAL" in line and "--" in before:
                address = before.split()[-1]
                if not address.startswith("127."):
                    out.add(f"{address}/32")
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) <= 7 or fields[0] == "lo":
                continue
            net = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
            mask = bin(int(fields[7], 16)).count("1")
            if mask:
                out.add(str(ipaddress.IPv4Network(f"{net}/{mask}", strict=False)))
            gateway = int(fields[2], 16)
            if gateway:
                out.add(f"{ipaddress.IPv4Address(gateway.to_bytes(4, 'little'))}/32")
    return sorted(out)


def _fstab(field: str) -> str:
    """``field`` escaped for an fstab line (octal for blanks and backslashes)."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in field)


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


def _stage_target(interpreters: Sequence[Path]) -> Path | None:
    """The first of :data:`STAGE_TARGETS` that is a folder holding none of ``interpreters``."""
    for name in STAGE_TARGETS:
        with contextlib.suppress(OSError):
            target = Path(name).resolve(strict=True)
            if target.is_dir() and not any(inside(p, target) for p in interpreters):
                return target
    return None


def _snippet(path: Path) -> bool:
    """True for the run's snippet file: a file, or a warm slot's FIFO it arrives through."""
    return path.is_file() or path.is_fifo()


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


@dataclass(frozen=True)
class HostFacts:
    """What a bwrap plan needs of the host, looked up by :meth:`Confinement.facts` (the
    plan itself reads nothing)."""

    #: Each of :data:`SYSTEM_DIRS` there is: ``(name, None)`` for a folder,
    #: ``(name, target)`` for a symlink.
    system: tuple[tuple[str, str | None], ...]
    #: ``/etc/resolv.conf``'s target when it lies outside ``/etc`` (bound in its place).
    resolv: str | None
    #: Where the stage is mounted (one of :data:`STAGE_TARGETS`); None: in the run folder.
    stage_target: str | None
    #: The ids a run drops to (:func:`sandbox_ids`).
    sandbox_ids: tuple[int, int]
    cgroup_ns: bool
    #: What a network-on run with egress must not reach (:func:`blocked_networks`).
    blocked: tuple[str, ...] = ()
    #: The run's snippet (its name in the run folder), and whether it is a warm
    #: slot's FIFO it arrives through.
    snippet: str | None = None
    snippet_fifo: bool = False
    #: A started interpreter's hook and code FIFO are in the run folder (:mod:`.prestart`).
    prestarted: bool = False
    #: The server's own uid and gid (what a run keeps when it cannot drop).
    server_ids: tuple[int, int] = (0, 0)
    #: The host ids a non-root server's run is mapped to, its own (:mod:`.subids`);
    #: None: the :class:`IdMap`'s last ones (a probe).
    mapped_ids: tuple[int, int] | None = None


@dataclass
class Confinement:
    """Builds the launch chain of one bwrap run (see the module docstring)."""

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
        drop, those of a run given no ids of its own (``own_ids`` of :meth:`command`:
        a probe's)."""
        if self.idmap is not None:
            return self.idmap.uid, self.idmap.gid
        if self.as_root:
            return sandbox_ids()
        return os.geteuid(), os.getegid()

    def facts(self, argv: Sequence[str], *, workdir: Path, view: View, blocked: bool) -> HostFacts:
        """What :meth:`plan` needs of the host for a run of ``argv`` in ``workdir``
        (``blocked``: the networks an egress run must not reach are looked up too)."""
        system: list[tuple[str, str | None]] = []
        for name in SYSTEM_DIRS:
            if os.path.islink(name):
                system.append((name, os.readlink(name)))
            elif os.path.isdir(name):
                system.append((name, None))
        resolv = None
        with contextlib.suppress(OSError):
            real = Path("/etc/resolv.conf").resolve()
            if real.is_file() and not inside(real, Path("/etc").resolve()):
                resolv = str(real)
        shared = _stage_target(view.interpreters) if self.drops else None
        # (Not a word of the display shim's text: "-c" and the code itself.)
        snippet = next(
            (a for a in argv[1:] if "/" not in a and "\n" not in a and _snippet(workdir / a)),
            None,
        )
        hook, code_fifo = workdir / prestart.HOOK_FILE, workdir / prestart.CODE_FIFO
        return HostFacts(
            system=tuple(system),
            resolv=resolv,
            stage_target=str(shared) if shared is not None else None,
            sandbox_ids=sandbox_ids(),
            cgroup_ns=CGROUP_NS,
            blocked=tuple(blocked_networks()) if blocked else (),
            snippet=snippet,
            snippet_fifo=snippet is not None and (workdir / snippet).is_fifo(),
            prestarted=snippet is None and hook.is_file() and code_fifo.is_fifo(),
            server_ids=(os.geteuid(), os.getegid()),
        )

    def command(
        self,
        argv: list[str],
        *,
        workdir: Path,
        allow_network: bool,
        view: View,
        disk_mb: int,
        bpf: bytes | None,
        egress: bool = False,
        first: Sequence[str] = (),
        own_ids: tuple[int, int] | None = None,
    ) -> list[str]:
        """The full argv; prepares ``workdir`` (stage folder, seccomp file, fstab).

        The :meth:`plan` of the run with this host's :meth:`facts`, executed
        (:func:`.launchplan.execute`), as an argv. ``own_ids``: the host uid and gid of
        this run alone (see :meth:`.LayeredIsolator.prepare`): as root, what it drops to
        instead of :func:`sandbox_ids`; with an :class:`IdMap`, what its user namespace
        maps :func:`sandbox_ids` to.
        """
        with_egress = allow_network and egress and self.net_tools is not None
        facts = self.facts(argv, workdir=workdir, view=view, blocked=with_egress)
        if own_ids is not None:
            assert self.drops, "only a run that drops its uid has ids of its own"
            if self.as_root:
                facts = dataclasses.replace(facts, sandbox_ids=own_ids)
            else:
                facts = dataclasses.replace(facts, mapped_ids=own_ids)
        plan = self.plan(
            argv,
            workdir=workdir,
            allow_network=allow_network,
            view=view,
            disk_mb=disk_mb,
            bpf=bpf,
            egress=egress,
            first=first,
            facts=facts,
        )
        launchplan.execute(plan)
        return plan.argv()

    def plan(
        self,
        argv: Sequence[str],
        *,
        workdir: Path,
        allow_network: bool,
        view: View,
        disk_mb: int,
        bpf: bytes | None,
        facts: HostFacts,
        egress: bool = False,
        first: Sequence[str] = (),
    ) -> LaunchPlan:
        """The launch plan of a run of ``argv`` (pure: all it knows of the host is ``facts``).

        ``egress`` (with ``allow_network``): the run gets its own network stack through
        slirp4netns, with the host's addresses, bridges and link-local unreachable;
        without it a network-on run shares the host's network.
        ``first``: shell lines the staging shell runs before anything else (the run
        cgroup join and the rlimits, when they need no step before the namespaces);
        a failing one stops the launch.
        """
        # When the run drops its uid, the stage is mounted on a folder everyone can
        # enter, so the run folder's own parents (a TMPDIR under /root, pytest's 0700
        # folders) need not be searchable by the sandbox uid; only this run's mount
        # namespace sees it. (Without a drop, the server's user can enter its own
        # folders anyway.) That folder is one no interpreter folder to stage lies in
        # (the tmpfs would hide it from its bind). Only if each of them holds one is
        # the stage made in the run folder and moved there (which works as root only).
        shared = Path(facts.stage_target) if facts.stage_target is not None else None
        stage = shared or workdir / STAGE
        moved = Path(STAGE_TARGETS[0]) if self.drops and shared is None else stage
        folders = (str(stage),) if shared is None else ()
        files: list[launchplan.PlanFile] = []
        fds: list[tuple[launchplan.Fd, str]] = []
        uid, gid = facts.sandbox_ids
        # The staging shell's options (see chain/stage.sh): the server's limit lines
        # first, then the files it opens for bubblewrap (the seccomp filter, what its
        # --file copies into the run folder) and a started interpreter.
        options = [word for line in first for word in ("--run", line)]
        if bpf is not None:
            path = workdir / SECCOMP_FILE
            files.append(launchplan.PlanFile(str(path), bpf, 0o600))
            options += ["--seccomp", str(path)]
            fds.append((launchplan.SECCOMP, str(path)))
        snippet = facts.snippet
        file_fd = launchplan.FILE.number
        if snippet is not None:
            # A warm slot's snippet comes later through a FIFO (see .pool).
            options += [
                "--snippet-fifo" if facts.snippet_fifo else "--snippet",
                str(workdir / snippet),
            ]
            fds.append((launchplan.FILE, str(workdir / snippet)))
        hook, code_fifo = workdir / prestart.HOOK_FILE, workdir / prestart.CODE_FIFO
        started = facts.prestarted
        if started:
            # A python slot whose interpreter starts ahead (see .prestart): its hook is
            # copied into the run's /tmp, and the code comes later through the FIFO on
            # the code fd, which the interpreter inherits; its stdout and stderr come on
            # fds of their own, and the chain's own output is prestart.CHAIN_FIFO.
            chain_output = workdir / prestart.CHAIN_FIFO
            options += ["--prestart", str(code_fifo), str(hook), str(chain_output)]
            fds += [
                (launchplan.CODE, str(code_fifo)),
                (launchplan.FILE, str(hook)),
                (launchplan.RUN_STDOUT, "the run's stdout pipe"),
                (launchplan.RUN_STDERR, "the run's stderr pipe"),
            ]
        staged = ["ro" + str(p) for p in view.interpreters]
        # One ``mount`` for every mount of the stage (an fstab of this run): the
        # size-capped tmpfs, an empty read-only one to cover hidden folders with, and
        # the interpreter folders, each mount point made by mount itself.
        table = [
            launchplan.Mount(
                "tmpfs",
                "gitpilot-run",
                str(stage),
                f"size={disk_mb}m,nr_inodes={disk_mb * INODES_PER_MB},mode=0755,nosuid,nodev",
            ),
            launchplan.Mount("tmpfs", "gitpilot-empty", str(stage / "empty"), EMPTY_OPTIONS),
            *(
                launchplan.Mount("none", str(source), str(stage / target), "bind,X-mount.mkdir")
                for source, target in zip(view.interpreters, staged, strict=True)
            ),
        ]
        fstab = workdir / FSTAB_FILE
        files.append(
            launchplan.PlanFile(
                str(fstab),
                "".join(
                    f"{_fstab(m.source)} {_fstab(m.target)} {m.op} {m.options} 0 0\n" for m in table
                ).encode(),
            )
        )
        options += ["--fstab", str(fstab), "--stage", str(stage)]
        if self.drops:
            options += ["--owner", f"{uid}:{gid}"]  # of the run's writable folders
        network = "none: a network namespace of its own with only a loopback (--unshare-net)"
        if allow_network and egress and self.net_tools is not None:
            # Its own network namespace and stack (slirp4netns), the host's networks
            # blocked there first.
            slirp, nsenter, ip = self.net_tools
            options += ["--net", self.unshare, ip, slirp, nsenter]
            options += [word for net in facts.blocked for word in ("--block", net)]
            fds += [
                (launchplan.NET_READY, str(stage / "ready")),
                (launchplan.NET_EXIT, str(stage / "done")),
            ]
            network = (
                "egress only: its own stack through slirp4netns (tap0), host loopback off; "
                "prohibit routes to " + (", ".join(facts.blocked) or "-")
            )
        elif allow_network:
            network = "the host's network (no --unshare-net)"
        if moved != stage:
            options += ["--move", str(moved)]
        unshare = [self.unshare, "--mount", "--propagation", "private"]
        if self.idmap is not None:
            # newuidmap/newgidmap write the maps: setgroups is allowed, so setpriv can
            # clear the groups below.
            unshare += self.idmap.unshare_options(facts.sandbox_ids, facts.mapped_ids)
        elif not self.as_root:
            unshare += ["--user", "--map-root-user"]
        unshare.append("--")
        steps = [
            launchplan.Step(tuple(unshare), "unshare: the run's private mount namespace"),
            launchplan.Step(
                (self.shell, "-c", launchplan.stage_script(), "sh", *options, "--"),
                "the staging shell: limits, fds, the stage's mounts, network; then exec",
            ),
        ]
        if self.setpriv is not None:
            steps.append(
                launchplan.Step(
                    (
                        self.setpriv,
                        f"--reuid={uid}",
                        f"--regid={gid}",
                        "--clear-groups",
                        "--bounding-set=-all",
                        "--inh-caps=-all",
                        "--",
                    ),
                    "setpriv: drop to the run's uid, no groups, no capabilities",
                )
            )
        cmd = [self.bwrap, "--unshare-user"]
        if not self.drops:
            # bwrap runs as root of the first user namespace: map the run to an
            # ordinary uid in its own (nested) one, with no capabilities.
            cmd += ["--uid", str(uid), "--gid", str(gid)]
        cmd += ["--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        if facts.cgroup_ns:
            # Its own cgroup namespace, rooted at the run cgroup it already joined: its
            # /proc/self/cgroup shows "/", not the host's path (debug checks from outside).
            cmd.append("--unshare-cgroup-try")
        if not allow_network:
            cmd.append("--unshare-net")  # (network on with egress: the slirp4netns one)
        cmd += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if bpf is not None:
            cmd += ["--seccomp", str(launchplan.SECCOMP.number)]
        binds: list[tuple[str, str, str]] = []
        for name, link in facts.system:
            binds.append(
                ("--symlink", link, name) if link is not None else ("--ro-bind", name, name)
            )
        if facts.resolv is not None:
            binds.append(("--ro-bind", facts.resolv, "/etc/resolv.conf"))
        # The run's own /tmp, empty: an interpreter folder that lies in /tmp (or /var/tmp,
        # /dev/shm) on the host is seen below RELOCATED instead, and its command with it.
        binds.append(("--bind", str(moved / "tmp"), "/tmp"))
        for source, target in zip(view.interpreters, staged, strict=True):
            binds.append(("--ro-bind", str(moved / target), str(relocated(source))))
        empty = str(moved / "empty")
        # (A cover inside a relocated interpreter folder covers it where the run sees it.)
        seen = functools.partial(seen_at, interpreters=view.interpreters)
        binds += [("--ro-bind", empty, str(seen(folder))) for folder in view.cover_dirs]
        binds += [("--ro-bind", "/dev/null", str(seen(file))) for file in view.cover_files]
        binds += [("--dev", "", "/dev"), ("--proc", "", "/proc")]
        binds.append(("--bind", str(moved / "shm"), "/dev/shm"))
        binds += [("--dir", "", "/var"), ("--symlink", "../tmp", "/var/tmp")]
        binds.append(("--bind", str(moved / "run"), str(workdir)))
        for op, origin, where in binds:
            cmd += [op, origin, where] if origin else [op, where]
        cmd += ["--chdir", str(workdir), "--remount-ro", "/", "--remount-ro", "/dev"]
        if snippet is not None:
            # The last step of bubblewrap's setup (the run folder is its own mount, still
            # writable): a warm slot waits here, every other step done, for its code.
            cmd += ["--file", str(file_fd), str(workdir / snippet)]
            binds.append(("--file", f"fd {file_fd}", str(workdir / snippet)))
        elif started:
            target = f"{prestart.HOOK_DIR}/{prestart.HOOK_MODULE}.py"
            cmd += ["--dir", prestart.HOOK_DIR, "--file", str(file_fd), target]
            binds += [("--dir", "", prestart.HOOK_DIR), ("--file", f"fd {file_fd}", target)]
        cmd.append("--")
        steps.append(
            launchplan.Step(
                tuple(cmd),
                "bwrap: new user, pid, ipc, uts, cgroup (and net) namespaces, a read-only root",
            )
        )
        mounts = [
            *table,
            *(launchplan.Mount(op, origin, where) for op, origin, where in binds),
            launchplan.Mount("--remount-ro", "", "/"),
            launchplan.Mount("--remount-ro", "", "/dev"),
        ]
        if self.drops:
            mapped = facts.mapped_ids or (
                (self.idmap.uid, self.idmap.gid) if self.idmap is not None else None
            )
            ids, groups = (uid, gid) if mapped is None else mapped, "none"
        else:
            ids, groups = facts.server_ids, f"the server's (kept: {self.groups_gap})"
        return LaunchPlan(
            engine="bwrap",
            steps=tuple(steps),
            command=tuple(relocated_command(argv, view.interpreters)),
            fds=tuple(fds),
            mounts=tuple(mounts),
            seccomp=launchplan.SECCOMP_BWRAP if bpf is not None else None,
            limits=tuple(first),
            ids=ids,
            groups=groups,
            network=network,
            folders=folders,
            files=tuple(files),
        )


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
