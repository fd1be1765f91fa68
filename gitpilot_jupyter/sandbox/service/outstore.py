"""The bytes of runs' ``out/`` files, kept by the service for each run's owner.

One 0700 folder of the server's (made on first use, removed at shutdown or, if the
server was killed, by the next one's sweep of run folders), one 0700
folder in it per run that handed files back, each file under a number (never its
own name: :func:`.local.outfiles.stored_name`). A run's files go after
:data:`OUT_TTL_SEC`, and the oldest runs' go first when the folder would hold more
than :data:`STORE_MAX_BYTES`. Only the run's owner reads them, by the rule plans
follow (:func:`..plans.belongs_to`): another identity is told there is no such file.
"""

from __future__ import annotations

import hashlib
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import RunFileNotFound
from ..local.cleanup import OUT_STORE_PREFIX, make_run_dir, remove_tree
from ..local.outfiles import stored_name
from ..outfiles import OUT_DIR, OutFile, check_out_name
from ..plans import belongs_to

#: How long a run's files are kept after it ended.
OUT_TTL_SEC = 3600
#: The most the store keeps, all runs together (the oldest runs' files go first).
STORE_MAX_BYTES = 1024 * 1024 * 1024


@dataclass
class _Kept:
    folder: Path
    owner: str | None
    files: dict[str, int]  # name -> index
    size: int
    until: float


class OutStore:
    """See the module docstring. Thread-safe: runs end on the loop, reads come from threads."""

    def __init__(
        self,
        *,
        ttl_sec: float = OUT_TTL_SEC,
        max_bytes: int = STORE_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_sec = ttl_sec
        self.max_bytes = max_bytes
        self._clock = clock
        self._root: Path | None = None
        self._runs: OrderedDict[str, _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False
        self._removal: Callable[[], object] | None = None

    def folder(self, run_id: str) -> Path:
        """A fresh, empty 0700 folder for what ``run_id`` hands back (blocking)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the store of run files is closed")
            if self._root is None:
                # Marked with this server, as run folders are: a later server removes it
                # if this one is killed; at this process's exit it goes at the latest.
                self._root = Path(make_run_dir(OUT_STORE_PREFIX))
                self._removal = weakref.finalize(self, remove_tree, self._root)
            root = self._root
        # A folder of its own even when a caller reuses a run id: the later run's files
        # replace the earlier's in :meth:`keep`, never mix with them.
        return Path(tempfile.mkdtemp(prefix=f"{run_id}-", dir=root))

    def keep(self, run_id: str, owner: str | None, files: list[OutFile], folder: Path) -> None:
        """Keep ``files`` (collected into ``folder``) for ``owner``; none: the folder goes."""
        if not files:
            remove_tree(folder)
            return
        size = sum(f["size"] for f in files)
        kept = _Kept(folder, owner, {f["name"]: i for i, f in enumerate(files)}, size, 0.0)
        with self._lock:
            kept.until = self._clock() + self.ttl_sec
            gone = [self._runs.pop(run_id)] if run_id in self._runs else []
            self._runs[run_id] = kept
            gone += self._evict()
        for old in gone:
            remove_tree(old.folder)

    def _evict(self) -> list[_Kept]:
        """Runs past their time, then the oldest while over the total (lock held)."""
        now = self._clock()
        gone = [kept for kept in self._runs.values() if kept.until <= now]
        self._runs = OrderedDict((r, k) for r, k in self._runs.items() if k.until > now)
        total = sum(kept.size for kept in self._runs.values())
        while total > self.max_bytes and len(self._runs) > 1:
            _, kept = self._runs.popitem(last=False)
            total -= kept.size
            gone.append(kept)
        return gone

    def read(self, run_id: str, name: str, user: str | None) -> bytes:
        """The bytes of ``name`` of ``run_id``'s ``out/``, for ``user`` (blocking).

        :class:`RunFileNotFound` for an unknown or expired run or name, and for a run
        of another identity (its existence is not disclosed).
        """
        check_out_name(name)
        with self._lock:
            gone = self._evict()
            kept = self._runs.get(run_id)
        for old in gone:
            remove_tree(old.folder)
        index = kept.files.get(name) if kept is not None and belongs_to(kept.owner, user) else None
        if kept is None or index is None:
            raise RunFileNotFound(
                f"no file {name!r} of run {run_id!r} (unknown, expired or not yours)"
            )
        try:
            with open(kept.folder / stored_name(index), "rb") as handle:
                return handle.read()
        except FileNotFoundError:  # evicted by another thread meanwhile
            raise RunFileNotFound(f"no file {name!r} of run {run_id!r} (expired)") from None

    def take(self, run_id: str, user: str | None) -> dict[str, bytes]:
        """Every file of ``run_id`` (``{name: bytes}``, for ``user``; empty for none or
        another identity's), forgotten here (blocking): a Dask worker hands its run's
        files to the batch's client and keeps no copy."""
        with self._lock:
            kept = self._runs.get(run_id)
            if kept is None or not belongs_to(kept.owner, user):
                return {}
            del self._runs[run_id]
        try:
            return {
                name: (kept.folder / stored_name(index)).read_bytes()
                for name, index in kept.files.items()
            }
        finally:
            remove_tree(kept.folder)

    def put(
        self, run_id: str, owner: str | None, files: list[OutFile], data: Mapping[str, bytes]
    ) -> tuple[list[OutFile], list[str]]:
        """Keep for ``owner`` the files of ``run_id`` that ran elsewhere (a Dask worker):
        each of ``files`` whose bytes in ``data`` have its listed size and sha256 (blocking).
        Answers the files kept and a note on each left out."""
        folder = self.folder(run_id)
        kept: list[OutFile] = []
        notes = []
        for entry in files:
            name = entry["name"]
            content = data.get(name)
            if content is None:
                notes.append(f"{OUT_DIR}/{name}: did not come back from the worker: left out")
                continue
            digest = "sha256:" + hashlib.sha256(content).hexdigest()
            if len(content) != entry["size"] or digest != entry["sha256"]:
                notes.append(f"{OUT_DIR}/{name}: not what the run listed: left out")
                continue
            (folder / stored_name(len(kept))).write_bytes(content)
            kept.append({"name": name, "size": len(content), "sha256": digest})
        self.keep(run_id, owner, kept, folder)
        return kept, notes

    def close(self) -> None:
        """Remove every kept file and the store's folder (the server stops)."""
        with self._lock:
            self._closed = True
            self._root = None
            self._runs.clear()
            removal, self._removal = self._removal, None
        if removal is not None:
            removal()  # (once: the finalizer is spent)
