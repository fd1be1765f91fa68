"""A session's files in and out, on the server's side (blocking: worker threads).

The session's folder is its sandbox's (bubblewrap's stage, its own uid's): the server
can neither write into it nor list it. So:

* **In.** When the session starts, a folder of the server's (:attr:`SessionFiles.inbox`)
  is bound read-only at :data:`.boot.INBOX_DIR` in the session's folder (as a run's
  input copies are bound, :mod:`..local.inputs`). Before a cell with inputs,
  :meth:`SessionFiles.stage` copies them there, checked against the cell's approval
  as they are copied (:func:`..inputs.stage_inputs`: ``approval_mismatch`` when one
  changed); the kernel's helper then links each at ``./NAME`` (:func:`.boot.link_code`).
  An input stays until an input of the same name replaces it or the session stops.
* **Out.** The session's ``out/`` is opened once, through the process that holds its
  stage (:class:`..local.outfiles.OutHold`), and collected after each cell by the
  rules of a run's (:func:`..local.outfiles.collect_dir`), without the files handed
  back before and unchanged since: each cell's result lists what it wrote or changed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..inputs import STAGED_DIR, RunInput, StagedInput, stage_inputs
from ..local.cleanup import make_run_dir, remove_tree
from ..local.outfiles import Collected, OutHold, Stamp, collect_dir, empty_dir
from ..outfiles import OUT_DIR, OutCaps
from .boot import INBOX_DIR


class SessionFiles:
    """One session's inbox (its server folder) and its ``out/`` (once opened)."""

    def __init__(self) -> None:
        #: The server's 0700 folder of the session's input copies (swept as a run folder
        #: if the server dies); its ``in/`` is what the session's launch binds.
        self.private = Path(make_run_dir())
        try:
            for folder in (self.private / STAGED_DIR, self.private / STAGED_DIR / INBOX_DIR):
                folder.mkdir()
                folder.chmod(0o755)  # (a session's own uid enters it, where it is bound)
        except BaseException:
            remove_tree(self.private)
            raise
        self._cells = 0
        #: Each input name linked in the session's folder, and the cell folder of its copy.
        self._linked: dict[str, str] = {}
        self._seen: dict[str, Stamp] = {}
        self._hold: OutHold | None = None

    @property
    def inbox(self) -> Path:
        """The folder the session sees, read-only, at :data:`.boot.INBOX_DIR`."""
        return self.private / STAGED_DIR / INBOX_DIR

    def staged(self) -> StagedInput:
        """The inbox as the session's launch binds it (a run's one input folder)."""
        return StagedInput(INBOX_DIR, "dir", self.inbox)

    def stage(self, inputs: Sequence[RunInput]) -> tuple[str, list[str]]:
        """Copy a cell's ``inputs`` into a cell folder of the inbox, as approved (else
        :class:`~..errors.ApprovalError`); the folder as the session sees it (relative to
        its folder) and the names to link."""
        self._cells += 1
        cell = str(self._cells)
        folder = self.inbox / cell
        folder.mkdir()
        folder.chmod(0o755)
        try:
            stage_inputs(inputs, folder)
        except BaseException:
            remove_tree(folder)
            raise
        return f"{INBOX_DIR}/{cell}/{STAGED_DIR}", [one.name for one in inputs]

    def linked(self, seen_as: str, names: Sequence[str]) -> None:
        """The kernel linked ``names`` to the copies in ``seen_as``: the cell folders no
        name links to any more go."""
        cell = seen_as.split("/")[1]
        for name in names:
            self._linked[name] = cell
        self._drop_unlinked()

    def unstage(self, seen_as: str) -> None:
        """A cell's copies the kernel did not take (its links failed): they go."""
        remove_tree(self.inbox / seen_as.split("/")[1])

    def _drop_unlinked(self) -> None:
        kept = set(self._linked.values())
        for folder in os.listdir(self.inbox):
            if folder not in kept:
                remove_tree(self.inbox / folder)

    def hold(self, hold: OutHold | None) -> None:
        """Open the session's ``out/`` through ``hold`` (its stage's holder), once the
        stage is made; the fd is let go of with the session's run."""
        if hold is not None:
            hold.grab()
            self._hold = hold

    def nothing_out(self) -> bool:
        """True when ``out/`` holds nothing (one listing: on the loop, no worker thread)."""
        hold = self._hold
        if hold is None or hold.fd < 0 or not empty_dir(hold.fd):
            return False
        self._seen = {}
        return True

    def collect(self, dest: Path, caps: OutCaps) -> Collected:
        """What a cell wrote or changed under ``out/``, copied into ``dest`` within
        ``caps``; what was left out (and why) in its notes."""
        hold = self._hold
        if hold is None or hold.fd < 0:
            found = Collected()
            reason = hold.failed if hold is not None else None
            found.notes.append(
                reason or f"{OUT_DIR}/ of this session was not reached: nothing kept"
            )
            return found
        found = collect_dir(hold.fd, dest, caps, self._seen)
        self._seen = found.stamps
        return found

    def close(self) -> None:
        """Remove the inbox (the session's run is over)."""
        remove_tree(self.private)
