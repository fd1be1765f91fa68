"""The seccomp filters of a run: syscalls no snippet needs fail with ``EPERM``.

Built once per process with libseccomp (through ``pyseccomp``, ctypes over
``libseccomp.so.2``) as compiled BPF. The bwrap engine's (:func:`compiled`) is handed
to bubblewrap (``--seccomp FD``), which installs it just before it execs the
interpreter; the namespace-free engine's (:func:`compiled_namespace_free`) is
installed by :class:`.landlock.Wall` in the child before exec. Other architectures'
syscall ABIs (32-bit ``int 0x80``, x32) are killed by libseccomp's arch check.
"""

from __future__ import annotations

import errno
import functools
import tempfile
from typing import Any

#: Denied outright: kernel keyrings, bpf, perf, mounts, modules, kexec, reboot,
#: other namespaces, file handles, ptrace and cross-process memory, swap, clocks,
#: io_uring, ...
DENIED = (
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "mount",
    "umount2",
    "pivot_root",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "setns",
    "open_by_handle_at",
    "name_to_handle_at",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "userfaultfd",
    "syslog",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "lookup_dcookie",
    "uselib",
    "iopl",
    "ioperm",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "fanotify_init",
    # io_uring: a second syscall interface whose operations this filter cannot see,
    # and a large share of recent kernel exploits; no snippet needs it.
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
CLONE_NEWUSER = 0x10000000
#: ``ioctl`` requests that push input into a terminal (TIOCSTI) or drive the console.
TIOCSTI = 0x5412
TIOCLINUX = 0x541C
FIX = (
    "install libseccomp (Debian/Ubuntu: sudo apt-get install libseccomp2) and the "
    "pyseccomp package (pip install pyseccomp)"
)


#: Refused too by the namespace-free engine's filter: leaving the run's session (the
#: end-of-run kill finds the run's processes by it), another process's fds, chroot.
NAMESPACE_FREE_DENIED = ("setsid", "pidfd_getfd", "chroot")
#: Every ``CLONE_NEW*`` flag (``unshare``); ``clone`` takes all but ``CLONE_NEWTIME``,
#: whose bit is part of the exit signal there.
CLONE_NEWTIME = 0x80
CLONE_NEW_FLAGS = (
    0x20000,
    0x02000000,
    0x04000000,
    0x08000000,
    CLONE_NEWUSER,
    0x20000000,
    0x40000000,
)
#: The address families a network-on run may open sockets of (AF_INET, AF_INET6).
INET_FAMILIES = (2, 10)


def _denying(sc: Any) -> tuple[Any, Any]:
    """A filter that allows all but :data:`DENIED`, and its EPERM action."""
    filt = sc.SyscallFilter(sc.ALLOW)
    deny = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        try:
            filt.add_rule(deny, name)
        except (ValueError, RuntimeError, OSError):
            continue  # a syscall this kernel/arch does not have
    return filt, deny


def _terminal_rules(sc: Any, filt: Any, deny: Any) -> None:
    for request in (TIOCSTI, TIOCLINUX):
        filt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))


def _exported(filt: Any) -> bytes:
    with tempfile.TemporaryFile() as out:
        filt.export_bpf(out)
        out.seek(0)
        return out.read()


def _libseccomp() -> tuple[Any, str | None]:
    try:
        import pyseccomp as sc  # type: ignore[import-untyped]
    except (ImportError, OSError) as exc:  # OSError: libseccomp.so.2 missing
        return None, f"libseccomp is not usable from Python here: {exc}"
    return sc, None


@functools.cache
def compiled() -> tuple[bytes | None, str | None]:
    """``(bpf, None)``, or ``(None, reason)`` when no filter can be built here."""
    sc, why = _libseccomp()
    if sc is None:
        return None, why
    try:
        filt, deny = _denying(sc)
        # No new user namespace (the snippet's way to regain capabilities).
        newuser = sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
        filt.add_rule(deny, "unshare", newuser)
        filt.add_rule(deny, "clone", newuser)
        # clone3 passes its flags in a struct the filter cannot read: ENOSYS makes
        # the C library fall back to clone, which is checked above.
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        _terminal_rules(sc, filt, deny)
        return _exported(filt), None
    except (ValueError, RuntimeError, OSError) as exc:
        return None, f"libseccomp could not build the filter: {exc}"


@functools.cache
def compiled_namespace_free(*, allow_inet: bool) -> tuple[bytes | None, str | None]:
    """The namespace-free engine's filter (installed by :class:`.landlock.Wall`), or why not.

    :data:`DENIED`, plus :data:`NAMESPACE_FREE_DENIED`, ``unshare``/``clone`` with any
    ``CLONE_NEW*`` flag, ``clone3`` ``ENOSYS`` (as in :func:`compiled`), and
    ``socket`` for every family: Landlock does not cover path unix sockets (such as
    ``/var/run/docker.sock``) below its newer ABIs, nor netlink, packet or vsock.
    With ``allow_inet`` only ``AF_INET``/``AF_INET6`` sockets may be made (Landlock
    and the engine decide where they go). ``socketpair`` stays allowed (asyncio
    needs it). Every refusal is ``EPERM`` (``clone3``: ``ENOSYS``).
    """
    sc, why = _libseccomp()
    if sc is None:
        return None, why
    try:
        filt, deny = _denying(sc)
        for name in NAMESPACE_FREE_DENIED:
            filt.add_rule(deny, name)
        for flag in (*CLONE_NEW_FLAGS, CLONE_NEWTIME):
            filt.add_rule(deny, "unshare", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        for flag in CLONE_NEW_FLAGS:
            filt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        _terminal_rules(sc, filt, deny)
        if not allow_inet:
            filt.add_rule(deny, "socket")
        else:
            # Every other family: below, between and above the two (64-bit compares,
            # so junk in the upper half of the register is refused too).
            low, high = INET_FAMILIES
            filt.add_rule(deny, "socket", sc.Arg(0, sc.LT, low))
            filt.add_rule(deny, "socket", sc.Arg(0, sc.GT, high))
            for family in range(low + 1, high):
                filt.add_rule(deny, "socket", sc.Arg(0, sc.EQ, family))
        return _exported(filt), None
    except (ValueError, RuntimeError, OSError) as exc:
        return None, f"libseccomp could not build the filter: {exc}"
