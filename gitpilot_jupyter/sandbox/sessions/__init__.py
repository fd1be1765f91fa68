"""Sessions: an IPython kernel in a sandbox run that keeps its state between cells.

Core only for now (the REST, magic, lab, CLI and agent faces come next). A session
is started by the subprocess backend's long-lived launch (the run's engine, launch
plan and limits, for the whole session), its kernel reached on ZMQ ``ipc`` sockets
that exist only in its sandbox (:mod:`.boot`), each cell an approved spec
(:meth:`SessionManager.run_cell`).
"""

from .kernel import CellOutcome, KernelSession
from .manager import SessionManager, check_name

__all__ = ["CellOutcome", "KernelSession", "SessionManager", "check_name"]
