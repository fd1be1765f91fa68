"""What a walled run does between fork and exec: :class:`Wall`, by ctypes, stdlib only.

Shared by the two places a namespace-free run is started from: the server's own
``preexec_fn`` (a warm slot) and the launcher (:mod:`.launcher`, a cold run), which
loads this file alone (nothing of the package: a small process forks quickly). So
it imports nothing but the standard library, and nothing of this package.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
from collections.abc import Callable, Sequence

if sys.platform != "win32":
    import resource

#: ``landlock_restrict_self``: the generic table's number, the same on every architecture.
SYS_RESTRICT_SELF = 446
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
#: Bytes per BPF instruction (``struct sock_filter``: u16 code, u8 jt, u8 jf, u32 k).
_BPF_INSN = 8


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


@functools.cache
def libc() -> ctypes.CDLL:
    """The C library, with ``errno`` kept for :func:`error`."""
    return ctypes.CDLL(None, use_errno=True)


def syscall() -> Callable[..., int]:
    """libc's variadic ``syscall``; every argument is passed as a C long (or a pointer)."""
    fn = libc().syscall
    fn.restype = ctypes.c_long
    return fn


def c_long(value: int) -> ctypes.c_long:
    """``value`` as a C long (an argument of :func:`syscall`)."""
    return ctypes.c_long(value)


def error(what: str) -> OSError:
    """The ``OSError`` of the C call ``what`` that just failed (its ``errno``)."""
    code = ctypes.get_errno()
    return OSError(code, f"{what} failed: {os.strerror(code)}")


class Wall:
    """A prepared wall: built in the server (or the launcher), applied in the child.

    ``ruleset_fd`` comes from :func:`.landlock.ruleset`; ``bpf`` is a compiled seccomp
    filter (:func:`.seccomp.compiled_namespace_free`) or None; ``rlimits`` are
    ``(resource, soft, hard)``; ``ids`` is ``(uid, gid)`` to drop to (a root server).
    Everything ctypes needs is made here, so :meth:`apply` is only syscalls.
    """

    def __init__(
        self,
        ruleset_fd: int,
        *,
        bpf: bytes | None = None,
        rlimits: Sequence[tuple[int, int, int]] = (),
        ids: tuple[int, int] | None = None,
    ) -> None:
        self.ruleset_fd = ruleset_fd
        self.rlimits = tuple((which, (soft, hard)) for which, soft, hard in rlimits)
        self.ids = ids
        self.bpf = bpf
        self._syscall = syscall()
        prctl = libc().prctl
        prctl.argtypes = (
            ctypes.c_int,
            ctypes.c_ulong,
            ctypes.c_ulong,
            ctypes.c_ulong,
            ctypes.c_ulong,
        )
        prctl.restype = ctypes.c_int
        self._prctl = prctl
        self._restrict_args = (c_long(SYS_RESTRICT_SELF), c_long(ruleset_fd), c_long(0))
        self._filter: ctypes.Array[ctypes.c_char] | None = None
        self._fprog: _SockFprog | None = None
        self._fprog_address = 0
        if bpf is not None:
            count, rest = divmod(len(bpf), _BPF_INSN)
            if rest or not 0 < count <= 0xFFFF:
                raise ValueError(f"not a compiled BPF program: {len(bpf)} bytes")
            self._filter = ctypes.create_string_buffer(bpf, len(bpf))
            self._fprog = _SockFprog(count, ctypes.addressof(self._filter))
            self._fprog_address = ctypes.addressof(self._fprog)

    def apply(self) -> None:
        """Wall in the calling process; raises at the first step that fails.

        Order: rlimits, the id drop (groups, gid, uid), no_new_privs (Landlock and
        seccomp need it from an unprivileged process), Landlock, seccomp last (its
        filter could refuse the calls before it).
        """
        for which, limits in self.rlimits:
            resource.setrlimit(which, limits)
        if self.ids is not None:
            uid, gid = self.ids
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
        if self._prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise error("prctl(PR_SET_NO_NEW_PRIVS)")
        if self._syscall(*self._restrict_args) != 0:
            raise error("landlock_restrict_self")
        if self._fprog_address and self._prctl(
            _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, self._fprog_address, 0, 0
        ):
            raise error("prctl(PR_SET_SECCOMP)")

    def close(self) -> None:
        """Close the ruleset fd (in the server, once the child is spawned)."""
        if self.ruleset_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.ruleset_fd)
            self.ruleset_fd = -1
