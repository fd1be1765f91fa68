"""The seccomp filter of a bwrap run: syscalls no snippet needs fail with ``EPERM``.

Built once per process with libseccomp (through ``pyseccomp``, ctypes over
``libseccomp.so.2``) and handed to bubblewrap as compiled BPF (``--seccomp FD``),
which installs it just before it execs the interpreter. Other architectures'
syscall ABIs (32-bit ``int 0x80``, x32) are killed by libseccomp's arch check.
"""

from __future__ import annotations

import errno
import functools
import tempfile

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


@functools.cache
def compiled() -> tuple[bytes | None, str | None]:
    """``(bpf, None)``, or ``(None, reason)`` when no filter can be built here."""
    try:
        import pyseccomp as sc  # type: ignore[import-untyped]
    except (ImportError, OSError) as exc:  # OSError: libseccomp.so.2 missing
        return None, f"libseccomp is not usable from Python here: {exc}"
    try:
        filt = sc.SyscallFilter(sc.ALLOW)
        deny = sc.ERRNO(errno.EPERM)
        for name in DENIED:
            try:
                filt.add_rule(deny, name)
            except (ValueError, RuntimeError, OSError):
                continue  # a syscall this kernel/arch does not have
        # No new user namespace (the snippet's way to regain capabilities).
        newuser = sc.Arg(0, sc.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
        filt.add_rule(deny, "unshare", newuser)
        filt.add_rule(deny, "clone", newuser)
        # clone3 passes its flags in a struct the filter cannot read: ENOSYS makes
        # the C library fall back to clone, which is checked above.
        filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        for request in (TIOCSTI, TIOCLINUX):
            filt.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
        with tempfile.TemporaryFile() as out:
            filt.export_bpf(out)
            out.seek(0)
            return out.read(), None
    except (ValueError, RuntimeError, OSError) as exc:
        return None, f"libseccomp could not build the filter: {exc}"
