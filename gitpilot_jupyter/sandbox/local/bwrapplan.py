"""The launch plan of a bubblewrap run: what it needs of the host, and the plan itself.

:func:`host_facts` looks up what a run of a :class:`.confine.Confinement` needs of the
host (:class:`HostFacts`); :func:`plan` builds its :class:`.launchplan.LaunchPlan` from
them alone (pure); :func:`command` does both, executes the plan and gives its argv.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..inputs import StagedInput
from ..outfiles import OUT_DIR
from ..rich import is_shim_command
from . import launchplan, mplfonts, outfiles, prestart
from .blockednets import blocked_networks
from .confine import (
    CGROUP_NS,
    SYSTEM_DIRS,
    Confinement,
    View,
    inside,
    relocated,
    relocated_command,
    sandbox_ids,
    seen_at,
)
from .inputs import input_binds
from .launchplan import LaunchPlan

#: Inodes of the writable space per MiB of its size (256 MiB: 16,384 files and folders).
INODES_PER_MB = 64
#: Where the run's private, size-capped writable space is mounted, inside the run folder.
STAGE = "stage"
SECCOMP_FILE = ".seccomp.bpf"
#: Where the run's stage is mounted in its own mount namespace when the run drops its
#: uid (folders anyone can enter): the first that holds no interpreter folder to stage.
STAGE_TARGETS = ("/tmp", "/var/tmp", "/mnt")
#: The run's mounts of its stage, one fstab line each (see :func:`plan`).
FSTAB_FILE = ".stage.fstab"
#: Where the run's input copies are bound in its stage (then each at ``./NAME``, read-only).
INPUTS_DIR = "in"
#: The read-only, empty tmpfs hidden folders are covered with (one inode: nothing fits).
EMPTY_OPTIONS = "ro,size=4k,nr_inodes=1,mode=0755,nosuid,nodev,noexec,X-mount.mkdir"


def _fstab(field: str) -> str:
    """``field`` escaped for an fstab line (octal for blanks and backslashes)."""
    return "".join(f"\\{ord(c):03o}" if c in " \t\n\\" else c for c in field)


def _stage_target(interpreters: Sequence[Path]) -> Path | None:
    """The first of :data:`STAGE_TARGETS` that is a folder holding none of ``interpreters``."""
    for name in STAGE_TARGETS:
        with contextlib.suppress(OSError):
            target = Path(name).resolve(strict=True)
            if target.is_dir() and not any(inside(p, target) for p in interpreters):
                return target
    return None


def _inputs_parts(
    inputs: Sequence[StagedInput], stage: Path
) -> tuple[list[str], list[tuple[launchplan.Fd, str]], list[launchplan.Mount]]:
    """The staging shell's options, fds and stage mounts for a run's input copies (in one
    folder): the fstab binds the folder through the fd the shell opened on it first (the
    stage may be mounted where the folder lies, /tmp). Nothing without inputs."""
    if not inputs:
        return [], [], []
    folders = {str(one.path.parent) for one in inputs}
    assert len(folders) == 1, "a run's inputs are staged in one folder"
    fd = f"/proc/self/fd/{launchplan.INPUTS.number}"
    return (
        ["--inputs", folders.pop()],
        [(launchplan.INPUTS, "the run's input copies, while the fstab mounts")],
        [launchplan.Mount("none", fd, str(stage / INPUTS_DIR), "bind,X-mount.mkdir")],
    )


def _snippet(path: Path) -> bool:
    """True for the run's snippet file: a file, or a warm slot's FIFO it arrives through."""
    return path.is_file() or path.is_fifo()


@dataclass(frozen=True)
class HostFacts:
    """What a bwrap plan needs of the host, looked up by :func:`host_facts` (the
    plan itself reads nothing)."""

    #: Each of :data:`.confine.SYSTEM_DIRS` there is: ``(name, None)`` for a folder,
    #: ``(name, target)`` for a symlink.
    system: tuple[tuple[str, str | None], ...]
    #: ``/etc/resolv.conf``'s target when it lies outside ``/etc`` (bound in its place).
    resolv: str | None
    #: Where the stage is mounted (one of :data:`STAGE_TARGETS`); None: in the run folder.
    stage_target: str | None
    #: The ids a run drops to (:func:`.confine.sandbox_ids`).
    sandbox_ids: tuple[int, int]
    cgroup_ns: bool
    #: What a network-on run with egress must not reach (:func:`.blockednets.blocked_networks`).
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
    #: None: the :class:`.confine.IdMap`'s last ones (a probe).
    mapped_ids: tuple[int, int] | None = None
    #: The server's matplotlib font list a python run gets a copy of (:mod:`.mplfonts`).
    font_list: str | None = None


def host_facts(
    chain: Confinement, argv: Sequence[str], *, workdir: Path, view: View, blocked: bool
) -> HostFacts:
    """What :func:`plan` needs of the host for a run of ``argv`` in ``workdir``
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
    shared = _stage_target(view.interpreters) if chain.drops else None
    # (Not a word of the display shim's text: "-c" and the code itself.)
    snippet = next(
        (a for a in argv[1:] if "/" not in a and "\n" not in a and _snippet(workdir / a)),
        None,
    )
    hook, code_fifo = workdir / prestart.HOOK_FILE, workdir / prestart.CODE_FIFO
    fonts = mplfonts.shared_font_list(argv[0]) if is_shim_command(argv) else None
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
        font_list=str(fonts) if fonts is not None else None,
    )


def command(
    chain: Confinement,
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
    inputs: Sequence[StagedInput] = (),
) -> list[str]:
    """The full argv; prepares ``workdir`` (stage folder, seccomp file, fstab).

    The :func:`plan` of the run with this host's :func:`host_facts`, executed
    (:func:`.launchplan.execute`), as an argv. ``own_ids``: the host uid and gid of
    this run alone (see :meth:`.LayeredIsolator.prepare`): as root, what it drops to
    instead of :func:`.confine.sandbox_ids`; with an :class:`.confine.IdMap`, what its
    user namespace maps :func:`.confine.sandbox_ids` to.
    """
    with_egress = allow_network and egress and chain.net_tools is not None
    facts = host_facts(chain, argv, workdir=workdir, view=view, blocked=with_egress)
    if own_ids is not None:
        assert chain.drops, "only a run that drops its uid has ids of its own"
        if chain.as_root:
            facts = dataclasses.replace(facts, sandbox_ids=own_ids)
        else:
            facts = dataclasses.replace(facts, mapped_ids=own_ids)
    launch = plan(
        chain,
        argv,
        workdir=workdir,
        allow_network=allow_network,
        view=view,
        disk_mb=disk_mb,
        bpf=bpf,
        egress=egress,
        first=first,
        facts=facts,
        inputs=inputs,
    )
    launchplan.execute(launch)
    return launch.argv()


def _run_folder_options(chain: Confinement, facts: HostFacts) -> list[str]:
    """The staging shell's options for the run's writable folders: their owner (a run
    that drops), and the font list a copy of which goes in its run folder's
    ``.matplotlib`` (the run's own, see :mod:`.mplfonts`)."""
    uid, gid = facts.sandbox_ids
    options = ["--owner", f"{uid}:{gid}"] if chain.drops else []
    if facts.font_list is not None:
        options += ["--mpl-fonts", facts.font_list]
    return options


def plan(
    chain: Confinement,
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
    inputs: Sequence[StagedInput] = (),
) -> LaunchPlan:
    """The launch plan of a run of ``argv`` (pure: all it knows of the host is ``facts``).

    ``egress`` (with ``allow_network``): the run gets its own network stack through
    slirp4netns, with the host's addresses, bridges and link-local unreachable;
    without it a network-on run shares the host's network.
    ``first``: shell lines the staging shell runs before anything else (the run
    cgroup join and the rlimits, when they need no step before the namespaces);
    a failing one stops the launch. ``inputs``: the run's verified copies (one folder),
    bound into the stage by its fstab, then read-only at ``./NAME`` in the run folder.
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
    moved = Path(STAGE_TARGETS[0]) if chain.drops and shared is None else stage
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
    more_options, more_fds, more_mounts = _inputs_parts(inputs, stage)
    options, fds, table = options + more_options, fds + more_fds, table + more_mounts
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
    options += _run_folder_options(chain, facts)
    network = "none: a network namespace of its own with only a loopback (--unshare-net)"
    if allow_network and egress and chain.net_tools is not None:
        # Its own network namespace and stack (slirp4netns), the host's networks
        # blocked there first.
        slirp, nsenter, ip = chain.net_tools
        options += ["--net", chain.unshare, ip, slirp, nsenter]
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
    # The run's out/ is a folder of the stage of its own, bound at out/ in the run folder:
    # a process of the chain holds the stage until the server has opened it (.outfiles).
    options += ["--hold", str(workdir / outfiles.HOLD_FIFO), str(workdir / outfiles.HOLD_PID)]
    if moved != stage:
        options += ["--move", str(moved)]
    unshare = [chain.unshare, "--mount", "--propagation", "private"]
    if chain.idmap is not None:
        # newuidmap/newgidmap write the maps: setgroups is allowed, so setpriv can
        # clear the groups below.
        unshare += chain.idmap.unshare_options(facts.sandbox_ids, facts.mapped_ids)
    elif not chain.as_root:
        unshare += ["--user", "--map-root-user"]
    unshare.append("--")
    steps = [
        launchplan.Step(tuple(unshare), "unshare: the run's private mount namespace"),
        launchplan.Step(
            (chain.shell, "-c", launchplan.stage_script(), "sh", *options, "--"),
            "the staging shell: limits, fds, the stage's mounts, network; then exec",
        ),
    ]
    if chain.setpriv is not None:
        steps.append(
            launchplan.Step(
                (
                    chain.setpriv,
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
    cmd = [chain.bwrap, "--unshare-user"]
    if not chain.drops:
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
        binds.append(("--symlink", link, name) if link is not None else ("--ro-bind", name, name))
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
    binds += input_binds(inputs, moved / INPUTS_DIR, workdir)
    binds.append(("--bind", str(moved / OUT_DIR), str(workdir / OUT_DIR)))
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
    if chain.drops:
        mapped = facts.mapped_ids or (
            (chain.idmap.uid, chain.idmap.gid) if chain.idmap is not None else None
        )
        ids, groups = (uid, gid) if mapped is None else mapped, "none"
    else:
        ids, groups = facts.server_ids, f"the server's (kept: {chain.groups_gap})"
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
