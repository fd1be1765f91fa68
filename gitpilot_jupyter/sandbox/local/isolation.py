"""OS isolation for the subprocess backend.

An :class:`Isolator` turns the interpreter argv into an isolated launch and
says which layers that launch really has. This module holds the interface and
the bare isolator (no OS layer); the layered one
(namespaces, cgroups, rlimits) is in :mod:`.layered`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..backend import ResourceLimits
from ..inputs import StagedInput
from ..records import IsolationGap, IsolationReport
from .inputs import move_inputs
from .launcherclient import LaunchedRun
from .outfiles import OutHold

#: Caps the containment engine: ``auto`` (bwrap, else landlock), ``bwrap``, ``landlock``,
#: ``unshare`` (namespaces alone, no file-system wall) or ``none``.
ISOLATION_ENV = "GITPILOT_SANDBOX_ISOLATION"
ISOLATION_CHOICES = ("auto", "bwrap", "landlock", "unshare", "none")
#: The engines that put a wall between a snippet and the user's files: a run on any other
#: is refused unless the administrator accepts uncontained runs.
CONTAINED_ENGINES = ("bwrap", "landlock")
#: The administrator's acceptance of runs this host cannot contain (``1``: accepted).
ALLOW_UNCONTAINED_ENV = "GITPILOT_SANDBOX_ALLOW_UNCONTAINED"
#: The layer a run names when it ran without a file-system wall (accepted by the admin),
#: and the one a network-on run names when it shared the host's network.
UNCONTAINED_LAYER = "uncontained"
HOST_NETWORK_LAYER = "host-network"
UNCONTAINED_FIX = (
    "use the matrixlab backend (a Docker container per snippet); or, to accept runs that "
    f"can read your files, an administrator sets {ALLOW_UNCONTAINED_ENV}=1 "
    "(or c.SandboxApp.allow_uncontained = True)"
)


def allow_uncontained_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """True when :data:`ALLOW_UNCONTAINED_ENV` says ``1`` (or ``true``, ``yes``)."""
    value = (os.environ if environ is None else environ).get(ALLOW_UNCONTAINED_ENV, "")
    return value.strip().lower() in ("1", "true", "yes")


@dataclass
class Launch:
    """How to start one isolated process, and how to clean up after it."""

    argv: list[str]
    layers: list[str] = field(default_factory=list)
    preexec_fn: Callable[[], None] | None = None
    #: Where the run's ``out/`` is read from once it is over, when not from its folder
    #: on this host (a bubblewrap run's: see :class:`.outfiles.OutHold`).
    out_hold: OutHold | None = None

    async def start(self, *, cwd: str, env: Mapping[str, str], stdin: bool) -> LaunchedRun | None:
        """Start the run by the launch's own means; None (the default): the backend
        spawns ``argv`` with ``preexec_fn`` itself."""
        return None

    def on_started(self, pid: int) -> None:
        """Called with the child's pid right after it was spawned."""

    def kill_all(self) -> None:
        """Kill every process of this run, including those that left its process group."""

    def cleanup(self) -> None:
        """Release what the launch set up (cgroups, ...). Safe to call twice."""

    def make_ahead(self) -> None:
        """Make now what the next launch like this one takes ready-made (off every
        run's path: after a run's answer, or once a warm slot started). Once; no-op here."""

    def memory_exceeded(self) -> bool:
        """True when the run was killed for going over its memory limit."""
        return False


class Isolator:
    """No OS isolation: the argv is run as is. Subclasses add layers.

    ``allow_uncontained``: the administrator accepts runs without a file-system wall
    (default from :data:`ALLOW_UNCONTAINED_ENV`); otherwise :meth:`refusal` stops them.
    """

    engine: str = "none"

    def __init__(self, *, allow_uncontained: bool | None = None) -> None:
        self.allow_uncontained = (
            allow_uncontained_from_env() if allow_uncontained is None else allow_uncontained
        )

    def prepare(
        self,
        argv: list[str],
        *,
        workdir: Path,
        allow_network: bool,
        limits: ResourceLimits,
        inputs: Sequence[StagedInput] = (),
    ) -> Launch:
        """Wrap ``argv`` (which runs in ``workdir``) in the isolation available here;
        ``inputs`` (the run's verified copies) appear in ``workdir`` under their names."""
        move_inputs(inputs, workdir)
        return Launch(argv=list(argv))

    def fingerprint(self, argv: list[str], *, allow_network: bool) -> Hashable | None:
        """What of the host a launch of ``argv`` is made from now, for a warm slot to be
        compared with at hand-out; None: this isolator's runs cannot be started ahead."""
        return None

    def layers(self, *, allow_network: bool = False) -> list[str]:
        """The layers a run gets now (for status)."""
        return []

    def refusal(self, *, allow_network: bool = False) -> IsolationGap | None:
        """Why a run cannot be contained here (None: it can), whatever the opt-in says.

        A run with one is refused unless ``allow_uncontained``; with it, it runs and
        says so (:data:`UNCONTAINED_LAYER`, :data:`HOST_NETWORK_LAYER`).
        """
        return {
            "layer": "containment",
            "reason": f"no containment engine on {sys.platform}: a snippet would run as "
            "the server's user, with its files",
            "fix": UNCONTAINED_FIX,
        }

    def gaps(self, *, allow_network: bool = False) -> list[IsolationGap]:
        """What the engine in force cannot keep from a run, for its plan (before approval)."""
        return []

    def hidden_paths(self) -> tuple[Sequence[Path], Sequence[Path]]:
        """The credential folders and files (resolved) a run gets empty ones in place of,
        as ``(folders, files)``: what a plan's home check asks of any isolator. None here
        (no file-system wall); an engine with one answers what its runs hide now."""
        return (), ()

    def report(self) -> IsolationReport:
        """``{"layers": [...], "unavailable": [{"layer", "reason", "fix"}]}`` for status."""
        refusal = self.refusal()
        return {
            "layers": self.layers(),
            "engine": self.engine,
            "unavailable": [refusal] if refusal is not None else [],
        }
