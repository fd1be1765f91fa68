"""The launch chain's first steps: the cgroup join and the rlimits, done by a shell.

Where ``/bin/sh`` and ``prlimit`` are found, the cgroup join and the rlimits are done
by the exec'd command itself: by the bubblewrap chain's staging shell
(:func:`stage_steps`, no process of its own), else by a tiny ``sh`` prefix before the
namespace tool starts (:func:`exec_prefix`). With no ``preexec_fn`` CPython can
``vfork`` instead of copying the whole server with ``fork``. What is found is probed
once and cached.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
import sys

from . import cgroups
from .rlimits import ULIMIT_CANDIDATES, RlimitPlan, capped

LINUX = sys.platform == "linux"


#: The shell that joins the run cgroup before anything else of the run starts (dash here).
SHELL = "/bin/sh"


@functools.cache
def launch_tools() -> tuple[str, str] | None:
    """``(sh, prlimit)`` when both are here and work, probed once; None means ``preexec_fn``."""
    prlimit = shutil.which("prlimit") if LINUX else None
    if prlimit is None or not os.access(SHELL, os.X_OK):
        return None
    probe = [SHELL, "-c", 'exec "$@"', "sh", prlimit, "--fsize=1048576:1048576", "--", SHELL]
    try:
        done = subprocess.run(
            [*probe, "-c", "exit 7"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return (SHELL, prlimit) if done.returncode == 7 else None


@functools.cache
def shell_ulimits() -> dict[int, tuple[str, int]]:
    """The rlimits :data:`SHELL`'s ``ulimit`` builtin sets exactly, soft = hard, probed once.

    Each candidate option is run once and the shell's own ``/proc/$$/limits`` read back
    (builtins only): a shell whose ``ulimit`` means something else is simply not used
    for that limit, and ``prlimit`` sets it instead.
    """
    found: dict[int, tuple[str, int]] = {}
    if not LINUX or not os.access(SHELL, os.X_OK):
        return found
    for which, (name, value, candidates) in ULIMIT_CANDIDATES.items():
        target = capped(which, value)
        for letter, unit in candidates:
            count = target // unit
            script = (
                f"ulimit -{letter} {count} && "
                'while IFS= read -r line; do echo "$line"; done </proc/$$/limits'
            )
            try:
                done = subprocess.run(
                    [SHELL, "-c", script], capture_output=True, text=True, timeout=10, check=False
                )
            except (OSError, subprocess.SubprocessError):
                continue
            want = str(count * unit)
            for line in done.stdout.splitlines():
                if line.startswith(name + " "):
                    fields = line[len(name) :].split()
                    if done.returncode == 0 and fields[:2] == [want, want]:
                        found[which] = (letter, unit)
            if which in found:
                break
    return found


def exec_prefix(
    tools: tuple[str, str], rlimits: RlimitPlan, cgroup: cgroups.CgroupRun | None
) -> list[str] | None:
    """The argv prefix that joins ``cgroup`` then sets ``rlimits`` and execs the rest.

    The shell (single-threaded) writes ``0``, itself, to each join file (a builtin: no
    fork; see :meth:`cgroups.CgroupRun.join_files`), so it and all it becomes and starts
    (the namespace tool, its pid namespace, the interpreter) are in the run cgroup;
    its ``ulimit`` builtin then sets the limits
    (where the shell states them exactly, else ``prlimit`` sets them on itself) and
    it execs the command, which inherits them. A failed join or limit stops the
    launch before the command runs. None when a limit has no ``prlimit`` option.
    """
    sh, prlimit = tools
    options = rlimits.prlimit_options()
    if options is None:
        return None
    builtins = rlimits.ulimit_commands(shell_ulimits())
    prefix = [prlimit, *options, "--"] if options and builtins is None else []
    procs = [str(path) for path in cgroup.join_files()] if cgroup is not None else []
    steps = [f'echo 0 >"${i}"' for i in range(1, len(procs) + 1)]
    if procs:
        steps.append(f"shift {len(procs)}")
    steps += builtins or []
    if steps:
        script = " && ".join([*steps, 'exec "$@"'])
        prefix = [sh, "-c", script, "sh", *procs, *prefix]
    return prefix


def stage_steps(
    shell: str, rlimits: RlimitPlan, cgroup: cgroups.CgroupRun | None, *, own_uid: bool = False
) -> list[str] | None:
    """The cgroup join and ``rlimits`` as the first lines of the bubblewrap chain's
    staging shell (``shell``), which saves the prefix shell's exec; None when they must
    come before the namespaces instead (:func:`exec_prefix`).

    Nothing of the run has started when the staging shell runs them: only ``unshare``
    came before (in the same process; with a non-root server's id map it forks
    ``newuidmap``/``newgidmap``, which exit before). The shell joins as it would
    have in the prefix (``0`` to each join file, see
    :meth:`cgroups.CgroupRun.join_files`), inside its new user namespace the same
    uid, so it and all it starts are in the run cgroup; ``set -e`` stops the launch at
    a failed join or limit. They stay in the prefix when a limit is ``RLIMIT_NPROC``
    (counted per user namespace from where it is set: :meth:`RlimitPlan.per_process`)
    unless ``own_uid``, when this shell's ``ulimit`` does not set a limit exactly
    (``prlimit`` must), and when ``shell`` is not the one :func:`shell_ulimits` probed.

    ``own_uid``: the run becomes a host uid of its own after this shell (a root server's,
    or one of a non-root server's subordinate range, in the user namespace the chain's
    ``unshare`` made): set here, ``RLIMIT_NPROC`` counts that run's processes alone,
    where set before ``unshare`` it would count those of every run of the server's user
    together (one run's fork bomb would stop the others from starting any).
    """
    if shell != SHELL or not (own_uid or rlimits.per_process()):
        return None
    builtins = rlimits.ulimit_commands(shell_ulimits())
    if builtins is None:
        return None
    joins = [f"echo 0 >{shlex.quote(str(p))}" for p in cgroup.join_files()] if cgroup else []
    return [*joins, *builtins]
