"""A run's launch chain as data: what each step runs, which fd carries what, the wall.

A :class:`LaunchPlan` is built by a pure function of its inputs (the view, the run
folder, the limits, the engine's tools, and the few host facts they need, looked
up beforehand): :func:`.bwrapplan.plan` for the bubblewrap engine,
:func:`walled_plan` for the namespace-free one. :func:`execute` then does what the
plan needs done on disk (the folders and files it names) and
:meth:`LaunchPlan.argv` is the command started. :func:`render` prints it for a
reviewer (``jupyter sandbox debug --show-launch``, and the golden tests under
``tests/isolation/golden``): reading one plan is enough to audit the wall.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..rich.wire import SHIM_ENV_SHOWN, SHIM_SHOWN, shim_env, shim_source


@dataclass(frozen=True)
class Fd:
    """A file descriptor the launch chain passes down, with its one job."""

    number: int
    name: str
    job: str


#: Every fd the chain opens beyond 0-2, each with one number and one job (one digit
#: each: dash, the usual ``/bin/sh``, redirects only those).
SECCOMP = Fd(3, "seccomp", "the compiled seccomp filter, read by bwrap --seccomp")
FILE = Fd(
    4,
    "file",
    "what bwrap --file copies into the sandbox: the snippet (a warm slot's FIFO, "
    "read to its end when the code comes) or a started interpreter's hook",
)
NET_READY = Fd(5, "net-ready", "slirp4netns's ready FIFO: it writes 1 once the run's stack is up")
NET_EXIT = Fd(
    6,
    "net-exit",
    "slirp4netns's exit FIFO: every process of the run holds its write end; "
    "slirp4netns exits when the last one closed it",
)
CODE = Fd(7, "code", "a started interpreter's code FIFO (prestart), read by its hook")
RUN_STDOUT = Fd(8, "run-stdout", "a started interpreter's stdout, moved onto 1 by its hook")
RUN_STDERR = Fd(9, "run-stderr", "a started interpreter's stderr, moved onto 2 by its hook")
#: The seccomp filters' names (:mod:`.seccomp` builds them).
SECCOMP_BWRAP = "the project's deny list (seccomp.compiled)"
SECCOMP_WALLED = "the deny list and no AF_INET/AF_INET6/AF_NETLINK/AF_PACKET/AF_VSOCK sockets"
SECCOMP_WALLED_INET = "the deny list, AF_INET and AF_INET6 allowed (network on)"
FDS = (SECCOMP, FILE, NET_READY, NET_EXIT, CODE, RUN_STDOUT, RUN_STDERR)
assert len({fd.number for fd in FDS}) == len(FDS), "one number per fd"
#: Open only while the stage is mounted (the fds above are all taken, and dash has no
#: tenth), so it takes net-ready's number, which is opened after it is closed.
INPUTS = Fd(
    NET_READY.number,
    "inputs",
    "the folder of the run's verified input copies, while the stage's fstab binds it "
    "(through /proc/self/fd: the stage may cover where it is on the host); closed then",
)


#: The staging shell of the bubblewrap chain (checked by shellcheck), run with ``sh -c``.
STAGE_SCRIPT = Path(__file__).parent / "chain" / "stage.sh"


@functools.cache
def stage_script() -> str:
    """:data:`STAGE_SCRIPT`'s text, read once."""
    return STAGE_SCRIPT.read_text()


@dataclass(frozen=True)
class Step:
    """One process image of the chain: its own words, up to the next step's."""

    argv: tuple[str, ...]
    what: str
    #: What the step does in its own process before it execs (the namespace-free
    #: engine's wall, made between fork and exec), in order.
    calls: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mount:
    """One mount of the run: ``op`` is an fstab type (the staging shell's mounts) or a
    bwrap option (``--ro-bind``, ``--tmpfs``, ``--symlink``...)."""

    op: str
    source: str
    target: str
    options: str = ""


@dataclass(frozen=True)
class Rules:
    """The namespace-free engine's Landlock ruleset."""

    execute: tuple[str, ...]
    read: tuple[str, ...]
    write: tuple[str, ...]
    devices: tuple[str, ...]
    deny_tcp: bool
    scoped: bool


@dataclass(frozen=True)
class PlanFile:
    """A file :func:`execute` writes before the launch."""

    path: str
    data: bytes
    mode: int | None = None


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a run's launch does, in the order it does it."""

    engine: str
    steps: tuple[Step, ...]
    #: The snippet's own command, which the last step execs.
    command: tuple[str, ...]
    #: The fds the chain opens, each with what it is opened on.
    fds: tuple[tuple[Fd, str], ...] = ()
    mounts: tuple[Mount, ...] = ()
    rules: Rules | None = None
    #: The seccomp filter's name (None: no filter).
    seccomp: str | None = None
    #: The cgroup join and the rlimits, as the chain runs them.
    limits: tuple[str, ...] = ()
    #: The host uid and gid the run becomes.
    ids: tuple[int, int] = (0, 0)
    #: Its supplementary groups: kept (the server's) or none.
    groups: str = "none"
    network: str = ""
    #: What :func:`execute` makes: folders, then files.
    folders: tuple[str, ...] = ()
    files: tuple[PlanFile, ...] = field(default=(), repr=False)

    def argv(self) -> list[str]:
        """The command to start: every step's words, then the snippet's command."""
        return [word for step in self.steps for word in step.argv] + list(self.command)


def execute(plan: LaunchPlan) -> None:
    """Do what ``plan`` needs on disk: make its folders, write its files."""
    for folder in plan.folders:
        Path(folder).mkdir(exist_ok=True)
    for file in plan.files:
        path = Path(file.path)
        path.write_bytes(file.data)
        if file.mode is not None:
            path.chmod(file.mode)


def _joined(argv: Sequence[str], indent: str = "     ") -> list[str]:
    """``argv`` shell-quoted, an option and its arguments a line, a script as a block."""
    lines: list[str] = []
    current: list[str] = []
    for word in argv:
        if word == stage_script():
            word = f'"$(cat {STAGE_SCRIPT.parent.name}/{STAGE_SCRIPT.name})"'
            current.append(word)
            continue
        if word == shim_source():
            current.append(SHIM_SHOWN)
            continue
        if "\n" in word:
            lines.append(indent + " ".join([*current, "'"]))
            lines += [indent + "  " + line for line in word.splitlines()]
            current = ["'"]
            continue
        if word.startswith("--") and current and current != ["'"]:
            lines.append(indent + " ".join(current))
            current = []
        current.append(shlex.quote(word))
    if current:
        lines.append(indent + " ".join(current))
    return lines


def render(plan: LaunchPlan) -> str:
    """``plan`` as text, one section per part, for a reviewer."""
    out = [f"engine: {plan.engine}", "", "steps (each execs the next):"]
    for number, step in enumerate(plan.steps, 1):
        out.append(f"  {number}. {step.what}")
        out += _joined(step.argv)
        out += [f"     {call}" for call in step.calls]
    out.append(f"  {len(plan.steps) + 1}. the snippet")
    out += _joined(plan.command)
    if shim_env(plan.command):
        out.append(f"     (in its environment: {SHIM_ENV_SHOWN})")
    out += ["", "fds:"]
    out += [f"  {fd.number} {fd.name}: {what}  ({fd.job})" for fd, what in plan.fds] or ["  -"]
    if plan.mounts:
        out += ["", "mounts (in order):"]
        for mount in plan.mounts:
            options = f"  [{mount.options}]" if mount.options else ""
            source = f"{mount.source} -> " if mount.source else ""
            out.append(f"  {mount.op} {source}{mount.target}{options}")
    if plan.rules is not None:
        rules = plan.rules
        out += ["", "landlock (everything else on disk is denied):"]
        for name in ("execute", "read", "write", "devices"):
            paths = getattr(rules, name)
            out.append(f"  {name}:")
            out += [f"    {p}" for p in paths] or ["    -"]
        out.append(f"  tcp bind/connect: {'denied' if rules.deny_tcp else 'allowed'}")
        scopes = "abstract unix sockets, signals" if rules.scoped else "none"
        out.append(f"  scoped: {scopes}")
    out += ["", f"seccomp: {plan.seccomp or 'none'}"]
    out += ["", "limits:"]
    out += [f"  {line}" for line in plan.limits] or ["  -"]
    uid, gid = plan.ids
    out += ["", f"runs as: uid {uid}, gid {gid}, supplementary groups: {plan.groups}"]
    out += ["", f"network: {plan.network}"]
    if plan.folders or plan.files:
        out += ["", "made before the launch:"]
        out += [f"  folder {f}" for f in plan.folders]
        out += [f"  file {f.path} ({len(f.data)} bytes)" for f in plan.files]
    return "\n".join(out) + "\n"


def walled_plan(
    command: Sequence[str],
    *,
    rules: Rules,
    seccomp: str,
    limits: Sequence[str],
    ids: tuple[int, int],
    dropped: bool,
    network: str,
    slot: Sequence[str] = (),
    hook: str | None = None,
) -> LaunchPlan:
    """The namespace-free engine's plan: one process, walled between fork and exec.

    ``dropped``: the run drops to ``ids`` (a root server), clearing its groups.
    ``slot``: a warm slot's shell, the words before ``command`` of
    :func:`.nsfree.slot_argv`, which waits behind the wall for the code and then execs
    ``command``; ``hook``: its interpreter starts ahead and waits in that hook (a file
    of the run folder: this engine has no private ``/tmp``), the code coming on
    :data:`CODE`.
    """
    uid, gid = ids
    inside = [
        "setsid (its own session: the end of the run kills that whole session)",
        *limits,
        *([f"setgroups([]); setresgid({gid}); setresuid({uid})"] if dropped else []),
        "prctl(PR_SET_NO_NEW_PRIVS, 1)",
        "landlock_restrict_self(the ruleset below)",
        f"seccomp(SECCOMP_SET_MODE_FILTER, {seccomp})",
    ]
    # A cold run is forked by the launcher (launcher.py); a warm slot by the server itself.
    parent = "the server's child" if slot else "the launcher's child"
    steps = [Step((), f"{parent}, between fork and exec, in this order", tuple(inside))]
    fds: tuple[tuple[Fd, str], ...] = ()
    if slot and hook is not None:
        what = (
            "a warm slot's shell, behind the wall: the code FIFO and the run's output on "
            f"their fds, then the interpreter, which waits in its hook {hook}"
        )
        steps.append(Step(tuple(slot), what))
        fds = (
            (CODE, "the run folder's code FIFO (its name removed once open)"),
            (RUN_STDOUT, "the run's stdout pipe"),
            (RUN_STDERR, "the run's stderr pipe"),
        )
    elif slot:
        what = (
            "a warm slot's shell, behind the wall: waits for the code in the snippet's "
            "FIFO, copies it out to its end and over the FIFO, then the interpreter"
        )
        steps.append(Step(tuple(slot), what))
    return LaunchPlan(
        engine="landlock",
        steps=tuple(steps),
        command=tuple(command),
        fds=fds,
        rules=rules,
        seccomp=seccomp,
        limits=tuple(limits),
        ids=ids,
        groups="none" if dropped else "the server's (kept)",
        network=network,
    )
