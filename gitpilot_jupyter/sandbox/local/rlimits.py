"""Per-process resource limits (``setrlimit``): the fallback when no cgroup is writable.

Only limits the kernel really enforces are claimed: ``RLIMIT_NPROC`` does not
apply to root, and macOS does not enforce ``RLIMIT_AS``. Memory is limited by
``RLIMIT_DATA`` (writable private memory, Linux 4.7+) rather than the address
space, because V8 (node) reserves gigabytes of address space it never uses.
An rlimit gives a ``MemoryError``, not a kill: that needs a cgroup. ``RLIMIT_NPROC``
counts every task of the user, so it is set to what the user already runs plus
the run's allowance.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..backend import ResourceLimits

if sys.platform != "win32":
    import resource

MIB = 1024 * 1024
#: ``prlimit`` (util-linux) option by rlimit, for launches that set limits in the exec'd command.
_PRLIMIT_OPTIONS = (
    {
        resource.RLIMIT_DATA: "data",
        resource.RLIMIT_NPROC: "nproc",
        resource.RLIMIT_FSIZE: "fsize",
        resource.RLIMIT_CPU: "cpu",
    }
    if sys.platform != "win32"
    else {}
)
#: ``ulimit`` options (and their units) a POSIX shell may use for each rlimit; which one
#: this shell really has is probed (dash: ``-p`` for processes, bash: ``-u``).
#: Each with its line in ``/proc/PID/limits`` and a value to probe with.
ULIMIT_CANDIDATES: dict[int, tuple[str, int, tuple[tuple[str, int], ...]]] = (
    {
        resource.RLIMIT_DATA: ("Max data size", 64 * MIB, (("d", 1024),)),
        resource.RLIMIT_NPROC: ("Max processes", 999, (("p", 1), ("u", 1))),
        resource.RLIMIT_FSIZE: ("Max file size", 8 * MIB, (("f", 512),)),
        resource.RLIMIT_CPU: ("Max cpu time", 3600, (("t", 1),)),
    }
    if sys.platform != "win32"
    else {}
)
#: CPU seconds a run may use: a backstop above the longest allowed timeout, per core.
CPU_SECONDS = 600 * (os.cpu_count() or 1)


@dataclass
class RlimitPlan:
    """The limits to set in the child before it execs, and the layer names they give."""

    limits: list[tuple[int, int]] = field(default_factory=list)
    layers: list[str] = field(default_factory=list)

    def apply(self) -> None:
        """Set every limit (soft = hard); runs in the child between fork and exec."""
        for which, value in self.limits:
            _, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))

    def prlimit_options(self) -> list[str] | None:
        """The same limits as ``prlimit`` options, or None for one it has no option for.

        Each value is capped at this process's hard limit now, which the child inherits:
        exactly what :meth:`apply` would set in it.
        """
        out: list[str] = []
        for which, value in self.limits:
            option = _PRLIMIT_OPTIONS.get(which)
            if option is None:
                return None
            value = capped(which, value)
            out.append(f"--{option}={value}:{value}")
        return out

    def per_process(self) -> bool:
        """True when no limit is ``RLIMIT_NPROC``: that one is counted per user in each user
        namespace from the one it is set in, so it must be set before the run's namespace
        is made; the others can be set by any process of the run before its code starts."""
        return all(which != resource.RLIMIT_NPROC for which, _ in self.limits)

    def ulimit_commands(self, options: Mapping[int, tuple[str, int]]) -> list[str] | None:
        """The same limits as shell ``ulimit`` builtins (soft = hard), or None.

        ``options`` is what the shell was probed to set exactly (option, unit); None
        when a limit has no option there or its value is not a whole number of units.
        """
        out: list[str] = []
        for which, value in self.limits:
            option = options.get(which)
            value = capped(which, value)
            if option is None or value % option[1]:
                return None
            out.append(f"ulimit -{option[0]} {value // option[1]}")
        return out


def capped(which: int, value: int) -> int:
    """``value`` capped at this process's hard limit of ``which`` (the child inherits it)."""
    _, hard = resource.getrlimit(which)
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _user_task_count(*uids: int) -> int:
    """How many tasks (threads count) the users run now, as ``RLIMIT_NPROC`` counts them."""
    count = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 0
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid in uids:
                count += len(os.listdir(f"/proc/{entry}/task"))
        except OSError:
            continue  # the process ended meanwhile
    return count


def unavailable_reasons(*, memory: bool, processes: bool) -> list[dict[str, str]]:
    """Why a memory or process limit cannot be an rlimit here (for status)."""
    out: list[dict[str, str]] = []
    if sys.platform == "win32":
        return [
            {
                "layer": "rlimits",
                "reason": "Windows has no setrlimit",
                "fix": "use the matrixlab backend for resource limits",
            }
        ]
    if processes and (sys.platform != "linux" or os.geteuid() == 0):
        out.append(
            {
                "layer": "rlimit-nproc",
                "reason": "RLIMIT_NPROC does not apply to root"
                if sys.platform == "linux"
                else "no per-run process limit on this platform",
                "fix": "run as a normal user, or give the server a writable pids cgroup",
            }
        )
    if memory and sys.platform != "linux":
        out.append(
            {
                "layer": "rlimit-data",
                "reason": "this platform does not enforce a memory rlimit",
                "fix": "use the matrixlab backend for a memory limit",
            }
        )
    return out


def plan_rlimits(
    limits: ResourceLimits,
    *,
    memory: bool = True,
    processes: bool = True,
    count_tasks: bool = True,
    run_uid: int | None = None,
    own_uid: bool = False,
) -> RlimitPlan:
    """The rlimits for one run. ``memory`` / ``processes`` are False when a cgroup covers them.

    ``count_tasks`` False skips the ``/proc`` scan (for status, which only needs the names).
    ``run_uid``: the host uid runs have when it is not the server's (the last id of its
    subordinate range); the kernel counts their tasks in the server's user namespaces
    with the user's own, so the tasks of the runs under way are counted too.
    ``own_uid``: the run has a uid no other process has (a root server's namespace-free
    run): its ``RLIMIT_NPROC`` is its allowance alone, and holds though the server is root.
    """
    plan = RlimitPlan()
    if sys.platform == "win32":
        return plan
    linux = sys.platform == "linux"
    if memory and linux:
        plan.limits.append((resource.RLIMIT_DATA, limits.memory_mb * MIB))
        plan.layers.append("rlimit-data")
    if processes and linux and own_uid:
        plan.limits.append((resource.RLIMIT_NPROC, limits.max_processes))
        plan.layers.append("rlimit-nproc")
    elif processes and linux and os.geteuid() != 0:
        uid = os.getuid()
        uids = (uid,) if run_uid is None else (uid, run_uid)
        running = _user_task_count(*uids) if count_tasks else 0
        plan.limits.append((resource.RLIMIT_NPROC, running + limits.max_processes))
        plan.layers.append("rlimit-nproc")
    plan.limits.append((resource.RLIMIT_FSIZE, limits.max_file_size_mb * MIB))
    plan.layers.append("rlimit-fsize")
    plan.limits.append((resource.RLIMIT_CPU, CPU_SECONDS))
    plan.layers.append("rlimit-cpu")
    return plan
