"""The launches the layered isolator makes: a run's cgroup, rlimits and kill.

:class:`LayeredLaunch` is a bubblewrap or ``unshare`` run's (its cgroup joined and its
rlimits set by the chain's shell or a ``preexec_fn``); :class:`WalledLaunch` is the
namespace-free engine's (its :class:`~.wall.Wall` put up between fork and exec: by the
launcher's child for a cold run, :mod:`.launcher`; by a ``preexec_fn`` for a slot).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from . import cgroups, landlock, launcherclient, nsfree
from .chainsteps import exec_prefix
from .isolation import Launch
from .rlimits import RlimitPlan, capped

LINUX = sys.platform == "linux"


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` by parent links, read from ``/proc`` (Linux)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rpartition(")")[2].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class LayeredLaunch(Launch):
    """A launch holding its run cgroup (if any) and its rlimits.

    ``staged``: ``argv`` joins the cgroup and sets the rlimits itself (its staging
    shell runs :func:`stage_steps`), so it is started as it is.
    """

    def __init__(
        self,
        argv: list[str],
        layers: list[str],
        rlimits: RlimitPlan,
        cgroup: cgroups.CgroupRun | None,
        tools: tuple[str, str] | None = None,
        *,
        staged: bool = False,
        own_uid: int | None = None,
    ) -> None:
        prefix = exec_prefix(tools, rlimits, cgroup) if tools is not None and not staged else None
        if staged:
            super().__init__(argv=argv, layers=layers, preexec_fn=None)
        elif prefix is None:
            super().__init__(argv=argv, layers=layers, preexec_fn=self._preexec)
        else:
            super().__init__(argv=prefix + argv, layers=layers, preexec_fn=None)
        self._rlimits = rlimits
        self._cgroup = cgroup
        self._pid: int | None = None
        #: The uid of its own a root server's bwrap run has (given back at cleanup).
        self._own_uid = own_uid

    def _preexec(self) -> None:
        # Runs in the child between fork and exec: join first, so all it starts is inside.
        if self._cgroup is not None:
            self._cgroup.join()
        self._rlimits.apply()

    def on_started(self, pid: int) -> None:
        """Remember the pid; the parent no longer needs the cgroup join fds."""
        self._pid = pid
        if self._cgroup is not None:
            self._cgroup.close_fds()

    def kill_all(self) -> None:
        """Kill the run's cgroup; without one, every descendant of the child still alive."""
        if self._cgroup is not None:
            self._cgroup.kill_all()
        elif self._pid is not None and LINUX:
            for pid in _descendants(self._pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def memory_exceeded(self) -> bool:
        """True when the kernel killed a process of the run for its memory limit."""
        return self._cgroup is not None and self._cgroup.oom_killed()

    def cleanup(self) -> None:
        """Kill leftovers, remove the run cgroup, give the run's own uid back."""
        try:
            if self._cgroup is not None:
                self._cgroup.kill_all(until_gone=True)
                self._cgroup.cleanup()
                self._cgroup = None
        finally:
            if self._own_uid is not None:
                nsfree.RUN_IDS.give_back(self._own_uid)
                self._own_uid = None


class WalledLaunch(LayeredLaunch):
    """A launch of the namespace-free engine: the child joins its cgroup, sets its
    rlimits, then puts up its :class:`~.landlock.Wall` before it execs.

    The run is its own session, which it cannot leave (``setsid`` is refused to it):
    the end-of-run kill takes every process of that session, cgroup or not.
    """

    def __init__(
        self,
        argv: list[str],
        layers: list[str],
        rlimits: RlimitPlan,
        cgroup: cgroups.CgroupRun | None,
        wall: landlock.Wall,
        run_uid: int | None,
        ahead: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(argv, layers, rlimits, cgroup, None)
        self._wall = wall
        with contextlib.suppress(OSError):  # else the start says why
            launcherclient.LAUNCHER.ensure()  # (in the worker thread that prepares)
        self._run_uid = run_uid
        #: Makes the next run's ruleset, cgroup and folder once this run is over, or a
        #: slot of it started (:func:`.layered._make_ahead`).
        self._ahead = ahead

    def _preexec(self) -> None:
        super()._preexec()
        self._wall.apply()

    async def start(
        self, *, cwd: str, env: Mapping[str, str], stdin: bool
    ) -> launcherclient.LaunchedRun:
        """Start the run through the launcher: the same steps as :meth:`_preexec`, in
        the launcher's child (a small process forks in a fraction of the server's time).

        Raises ``OSError`` (the run is refused) when the wall or the exec failed.
        """
        limits = [(which, capped(which, value)) for which, value in self._rlimits.limits]
        wall = launcherclient.WallParts(
            ruleset_fd=self._wall.ruleset_fd,
            bpf=self._wall.bpf,
            rlimits=tuple((which, value, value) for which, value in limits),
            ids=self._wall.ids,
        )
        join = self._cgroup.join_fds() if self._cgroup is not None else []
        return await launcherclient.launch(
            self.argv, cwd=cwd, env=env, wall=wall, join_fds=join, stdin=stdin
        )

    def on_started(self, pid: int) -> None:
        """Remember the pid; the parent no longer needs the ruleset or the join fds."""
        super().on_started(pid)
        self._wall.close()

    def kill_all(self) -> None:
        """Kill every process of the run: by its cgroup where it has one, which holds
        them all (each process joined it before its wall went up, and none can leave
        it: the cgroup files are out of its reach), else by its session, which none
        can leave either. (The session scan reads all of ``/proc``, ~0.35 ms of the
        answer's path; the cleanup, after the answer, runs it all the same.)"""
        if self._cgroup is not None:
            self._cgroup.kill_all()
        elif self._pid is not None:
            nsfree.kill_session(self._pid)

    def cleanup(self) -> None:
        """Kill leftovers, remove the run cgroup, give the run's uid back."""
        try:
            if self._pid is not None:
                nsfree.kill_session(self._pid)
            super().cleanup()
        finally:
            self._wall.close()
            if self._run_uid is not None:
                nsfree.RUN_IDS.give_back(self._run_uid)
                self._run_uid = None
            self.make_ahead()

    def make_ahead(self) -> None:
        """Make the next run's spare ruleset, cgroup and folder, once."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead()
