"""The host ids of a non-root server's runs: one pair per run under way, from its
subordinate range.

A root server gives each run a uid of its own (:data:`.nsfree.RUN_IDS`); a server that
is not root can map its runs only to ids of its subordinate range (``/etc/subuid``,
``/etc/subgid``, through ``newuidmap``). Each run (and each warm slot, which is a run)
claims one pair of them here, counted down from the range's end (containers count
theirs up from its start) and leaving the last pair, the :class:`.confine.IdMap`'s own,
to the probes. So no run shares the per-uid accounting of the kernel (pipe buffers,
epoll watches, locked memory, key quotas, in-flight unix fds) with another.

A claim is an ``flock`` on a file named after the uid in the user's claim folder
(:mod:`.idclaims`): two servers of the same user never hand one id to two runs, and a
server killed outright lets its claims go with its fds.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .confine import IdMap
from .idclaims import claim_folder, lock_id, private_folder
from .launches import LayeredLaunch


@dataclass
class Claim:
    """One run's host ids, held until :meth:`release`."""

    uid: int
    gid: int
    owner: RunIds
    #: The locked claim file (None: claimed in this process alone).
    fd: int | None

    @property
    def ids(self) -> tuple[int, int]:
        """The host uid and gid."""
        return self.uid, self.gid

    def release(self) -> None:
        """Give the ids back (once; later calls do nothing)."""
        self.owner._release(self)


class RunIds:
    """Claims host ids for runs from one :class:`.confine.IdMap`'s range."""

    def __init__(self, idmap: IdMap, folder: Path | None = None) -> None:
        self.idmap = idmap
        self.folder = claim_folder() if folder is None else folder
        self._lock = threading.Lock()
        self._held: dict[int, Claim] = {}
        self._shared: bool | None = None

    @property
    def shared(self) -> bool:
        """False when the claim folder is not this user's alone: claims are then kept in
        this process only (still one pair per run of this server). The folder is made
        on first use (``debug --show-launch`` makes nothing)."""
        if self._shared is None:
            self._shared = private_folder(self.folder)
        return self._shared

    def first(self) -> tuple[int, int]:
        """The ids the first run claims (what ``debug --show-launch`` shows)."""
        return self.idmap.uid - 1, self.idmap.gid - 1

    def take(self) -> Claim:
        """The next free pair of ids: the highest one that no run of any server of this
        user holds. OSError when every one is in use."""
        with self._lock:
            for offset in range(1, self.idmap.count):
                uid = self.idmap.uid - offset
                if uid in self._held:
                    continue
                shared = self.shared
                fd = self._lock_file(uid) if shared else None
                if shared and fd is None:
                    continue  # another server's run holds it
                claim = Claim(uid, self.idmap.gid - offset, self, fd)
                self._held[uid] = claim
                return claim
        raise OSError(f"every id of the subordinate range below {self.idmap.uid} is in use")

    def _lock_file(self, uid: int) -> int | None:
        return lock_id(self.folder, str(uid))

    def _release(self, claim: Claim) -> None:
        with self._lock:
            if self._held.get(claim.uid) is not claim:
                return
            del self._held[claim.uid]
            fd, claim.fd = claim.fd, None
        if fd is not None:
            os.close(fd)  # (the lock goes with its last fd)


_REGISTRIES: dict[IdMap, RunIds] = {}
_REGISTRIES_LOCK = threading.Lock()


def run_ids(idmap: IdMap) -> RunIds:
    """The one :class:`RunIds` of this process for ``idmap``'s range."""
    with _REGISTRIES_LOCK:
        if idmap not in _REGISTRIES:
            _REGISTRIES[idmap] = RunIds(idmap)
        return _REGISTRIES[idmap]


class ClaimedLaunch(LayeredLaunch):
    """A bwrap launch of a non-root server's run: its :class:`Claim` is given back at
    cleanup, once its processes are gone."""

    def __init__(self, *args: Any, claim: Claim, **kwargs: Any) -> None:
        """:class:`.LayeredLaunch`'s arguments, and the run's ``claim``."""
        super().__init__(*args, **kwargs)
        self._claim = claim

    def cleanup(self) -> None:
        """Kill leftovers, remove the run cgroup, give the run's ids back."""
        try:
            super().cleanup()
        finally:
            self._claim.release()
