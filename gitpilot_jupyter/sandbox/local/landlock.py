"""The namespace-free wall: Landlock rules, no_new_privs, rlimits and seccomp, by ctypes.

For hosts that forbid user namespaces (a JupyterHub pod, ``docker run`` with the
default seccomp profile) but allow Landlock and seccomp. A :class:`~.wall.Wall` is built
(ruleset fd, compiled BPF, rlimits) and applied in the run's process between fork and
exec (a cold run's by the launcher's child, :mod:`.launcher`; a warm slot's by the
server's ``preexec_fn``), in a fixed order: rlimits, the id drop,
``PR_SET_NO_NEW_PRIVS``, ``landlock_restrict_self``, the seccomp filter.

Why our own ctypes layer rather than the ``landlockpy`` package (ABI 1-11): the wall
then has no dependency beyond the C library, and everything the child does between
fork and exec is bare syscalls through function pointers prepared in the parent
(no import, no allocation of note, no lock another thread might hold). It is three
syscalls (444 create, 445 add rule, 446 restrict: the same number on every
architecture) and three structs.

Landlock is checked by effect (:func:`probe`), never by the ABI number alone: a
kernel that has it but does not enforce it (``lsm=`` without ``landlock``) counts as
no wall.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from .wall import Wall as Wall
from .wall import c_long, error, syscall

# Syscall numbers: the generic table's, the same on x86_64, aarch64 and the others.
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_CREATE_RULESET_VERSION = 1 << 0
_RULE_PATH_BENEATH = 1

# File-system rights, each with the ABI that brought it.
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
#: Every file-system right an ABI handles (index = ABI; 0 = no Landlock).
_FS_BY_ABI = (0, (1 << 13) - 1, (1 << 14) - 1, (1 << 15) - 1, (1 << 15) - 1, (1 << 16) - 1)
#: The rights a rule on a file (not a folder) may carry; others make the kernel answer EINVAL.
_FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_IOCTL_DEV
_EXECUTE_RIGHTS = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
_READ_RIGHTS = FS_READ_FILE | FS_READ_DIR
_DEVICE_RIGHTS = FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
# Network (ABI 4) and scopes (ABI 6).
NET_BIND_TCP = 1 << 0
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1
NET_ABI = 4
SCOPE_ABI = 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)) in the kernel's header: 12 bytes
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


@functools.cache
def abi() -> int:
    """The Landlock ABI version of this kernel; 0 when it lacks Landlock or it is disabled."""
    if sys.platform != "linux":
        return 0
    call = syscall()
    version = call(c_long(_SYS_CREATE_RULESET), None, c_long(0), c_long(_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def handled_fs(version: int) -> int:
    """Every file-system right Landlock ABI ``version`` handles."""
    return _FS_BY_ABI[min(version, len(_FS_BY_ABI) - 1)]


@dataclass(frozen=True)
class FsRules:
    """What a walled process may reach of the file system; everything else is denied.

    Paths that do not exist are skipped. A rule on a file gets only the file rights
    of its kind (the kernel refuses folder rights on a file).
    """

    #: Read and execute (system folders, the interpreter's folders, or single files).
    execute: tuple[str, ...] = ()
    #: Read only.
    read: tuple[str, ...] = ()
    #: Every right of this ABI inside (read, write, execute, make and remove files and
    #: folders, truncate, refer): the run's own folder.
    write: tuple[str, ...] = ()
    #: Device files (``/dev/null``, ``/dev/zero``, ``/dev/urandom``): read, write, ioctl.
    devices: tuple[str, ...] = ()


def ruleset(rules: FsRules, *, deny_tcp: bool, scoped: bool) -> int:
    """A Landlock ruleset fd (close-on-exec) allowing ``rules`` and nothing else on disk.

    It handles every file-system right of this ABI; with ``deny_tcp`` (ABI >= 4) TCP
    bind and connect too, with no rule allowing any port; with ``scoped`` (ABI >= 6)
    abstract unix sockets and signals are confined to the walled process's domain.
    Raises ``OSError`` when Landlock is missing or a rule is refused, ``ValueError``
    for a folder rule on ``/proc`` or a process's folder in it; a file rule that
    resolves into a process's folder is skipped (see :func:`_add_path`).
    """
    version = abi()
    if version < 1:
        raise OSError(errno.EOPNOTSUPP, "Landlock is not available in this kernel")
    handled = handled_fs(version)
    attr = _RulesetAttr(
        handled_access_fs=handled,
        handled_access_net=(NET_BIND_TCP | NET_CONNECT_TCP)
        if deny_tcp and version >= NET_ABI
        else 0,
        scoped=(SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL)
        if scoped and version >= SCOPE_ABI
        else 0,
    )
    # An older ABI reads a shorter struct: pass only the fields it knows.
    size = 8 if version < NET_ABI else (16 if version < SCOPE_ABI else ctypes.sizeof(attr))
    call = syscall()
    fd = int(call(c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), c_long(size), c_long(0)))
    if fd < 0:
        raise error("landlock_create_ruleset")
    try:
        os.set_inheritable(fd, False)  # the kernel sets O_CLOEXEC already; say it here too
        add_rules(fd, rules)
    except BaseException:
        os.close(fd)
        raise
    return fd


def add_rules(fd: int, rules: FsRules) -> None:
    """Add ``rules`` to the ruleset ``fd`` (of :func:`ruleset`, not yet applied).

    A ruleset applied to a process is copied into its domain: rules added to the fd
    later do not reach that process.
    """
    handled = handled_fs(abi())
    call = syscall()
    groups = (
        (rules.execute, _EXECUTE_RIGHTS),
        (rules.read, _READ_RIGHTS),
        (rules.devices, _DEVICE_RIGHTS),
        (rules.write, handled),
    )
    for paths, rights in groups:
        for path in paths:
            _add_path(call, fd, path, rights & handled)


def _in_process_tree(target: int) -> bool:
    """True when the opened ``target`` is ``/proc`` or below a process's folder in it."""
    real = Path(os.readlink(f"/proc/self/fd/{target}")).parts  # one syscall, links resolved
    return real[:2] == ("/", "proc") and (len(real) == 2 or real[2].isdigit())


def _add_path(call: Callable[..., int], fd: int, path: str, rights: int) -> None:
    try:
        target = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        folder = stat.S_ISDIR(os.fstat(target).st_mode)
        if _in_process_tree(target):
            # Landlock's ptrace scope stops /proc/PID/mem, exe, cwd, root, but not
            # environ, maps or auxv (PTRACE_MODE_READ; seen on 6.18): a folder rule
            # there would show the server's environment. A file resolving there
            # (/etc/mtab -> /proc/self/mounts) is the server's, never the run's:
            # skipped. Single /proc files (cpuinfo) are fine.
            if folder:
                raise ValueError(f"no rule may open /proc or a process in it: {path}")
            return
        if not folder:
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=target)
        done = call(
            c_long(_SYS_ADD_RULE),
            c_long(fd),
            c_long(_RULE_PATH_BENEATH),
            ctypes.byref(rule),
            c_long(0),
        )
        if done < 0:
            raise error(f"landlock_add_rule({path})")
    finally:
        os.close(target)


#: What the probe's child tries; each line it prints is an escape.
_PROBE_CHILD = r"""
import socket, sys
secret, outside, inside, port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
escapes = []
try:
    open(secret).read()
    escapes.append("read a file outside its rules")
except OSError:
    pass
try:
    open(outside, "w").close()
    escapes.append("wrote a file outside its folder")
except OSError:
    pass
if port:
    s = socket.socket()
    s.settimeout(5)
    try:
        s.connect(("127.0.0.1", port))
        escapes.append("connected to a loopback TCP port")
    except OSError:
        pass
try:
    socket.socket(socket.AF_UNIX)
    escapes.append("made a unix socket")
except OSError:
    pass
with open(inside, "w") as f:
    f.write("ok")
print("\n".join(escapes))
"""


def interpreter_rules() -> tuple[str, ...]:
    """System folders (without ``/etc``) and this interpreter's folders: what ``python`` needs."""
    from .confine import SYSTEM_DIRS, needed_paths  # imported late: confine may import this

    interpreter = tuple(str(p) for p in needed_paths(sys.executable))
    return tuple(d for d in SYSTEM_DIRS if d != "/etc") + interpreter


def run_walled(
    wall: Wall, argv: Sequence[str], cwd: str | None = None
) -> tuple[subprocess.CompletedProcess[str] | None, str]:
    """Run ``argv`` behind ``wall`` (output captured, empty environment, in ``cwd``).

    ``(result, "")``, or ``(None, reason)`` when the wall could not be applied: the
    reason comes back through a pipe, as ``subprocess`` passes on only that
    ``preexec_fn`` raised.
    """
    report_r, report_w = os.pipe()

    def apply() -> None:
        try:
            wall.apply()
        except OSError as exc:
            os.write(report_w, str(exc).encode())
            raise

    try:
        try:
            result = subprocess.run(
                list(argv),
                preexec_fn=apply,
                capture_output=True,
                text=True,
                timeout=60,
                env={},
                cwd=cwd,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(report_w)
            report_w = -1
            reason = os.read(report_r, 4096).decode(errors="replace")
            return None, reason or f"a walled process could not start: {exc}"
        return result, ""
    finally:
        if report_w >= 0:
            os.close(report_w)
        os.close(report_r)


@functools.cache
def probe() -> str | None:
    """None when the namespace-free wall holds here, checked by effect; else why not.

    A real child walled to a temporary folder (the network-off seccomp filter's
    ``allow_inet`` variant, so TCP is left to Landlock) must fail to read and write
    outside it, fail a TCP connect to a loopback listener opened here (ABI >= 4),
    fail to make a unix socket, and write inside it. Cached: once per process.
    """
    from . import seccomp

    version = abi()
    if version < 1:
        return f"Landlock is not enforced here (ABI {version})"
    bpf, why = seccomp.compiled_namespace_free(allow_inet=True)
    if bpf is None:
        return f"no seccomp filter: {why}"
    with (
        tempfile.TemporaryDirectory(prefix="gitpilot-landlock-") as top,
        socket.socket() as listener,
    ):
        folder, other = Path(top, "run"), Path(top, "other")
        folder.mkdir()
        other.mkdir()
        (other / "secret").write_text("secret")
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1] if version >= NET_ABI else 0
        rules = FsRules(execute=interpreter_rules(), write=(str(folder),))
        try:
            wall = Wall(ruleset(rules, deny_tcp=True, scoped=True), bpf=bpf)
        except OSError as exc:
            return f"landlock_create_ruleset failed: {exc}"
        paths = (other / "secret", other / "new", folder / "ok")
        try:
            argv = [sys.executable, "-I", "-S", "-c", _PROBE_CHILD, *map(str, paths), str(port)]
            child, reason = run_walled(wall, argv)
        finally:
            wall.close()
        if child is None:
            return reason
        escapes = [line for line in child.stdout.splitlines() if line]
        with contextlib.suppress(BlockingIOError):
            listener.accept()[0].close()
            escapes.append("its TCP connect reached the listener")
        if paths[1].exists():
            escapes.append("its write outside its folder arrived")
        if child.returncode != 0 or not paths[2].is_file():
            error = child.stderr.strip()[-300:]
            return f"a walled process failed in its folder (exit {child.returncode}): {error}"
        if escapes:
            return "Landlock is not enforced here: a walled process " + "; ".join(escapes)
    return None
