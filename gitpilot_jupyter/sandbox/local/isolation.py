"""OS isolation for the subprocess backend.

An :class:`Isolator` turns the interpreter argv into an isolated launch and
says which layers that launch really has. This module holds the interface and
the bare isolator (no OS layer); the layered one
(namespaces, cgroups, rlimits) is in :mod:`.layered`.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path

from ..backend import ResourceLimits
from ..records import IsolationReport

#: Caps the namespace tool: ``auto`` (bwrap, else unshare), ``bwrap``, ``unshare``, ``none``.
ISOLATION_ENV = "GITPILOT_SANDBOX_ISOLATION"
ISOLATION_CHOICES = ("auto", "bwrap", "unshare", "none")


@dataclass
class Launch:
    """How to start one isolated process, and how to clean up after it."""

    argv: list[str]
    layers: list[str] = field(default_factory=list)
    preexec_fn: Callable[[], None] | None = None

    def on_started(self, pid: int) -> None:
        """Called with the child's pid right after it was spawned."""

    def kill_all(self) -> None:
        """Kill every process of this run, including those that left its process group."""

    def cleanup(self) -> None:
        """Release what the launch set up (cgroups, ...). Safe to call twice."""

    def memory_exceeded(self) -> bool:
        """True when the run was killed for going over its memory limit."""
        return False


class Isolator:
    """No OS isolation: the argv is run as is. Subclasses add layers."""

    def prepare(
        self,
        argv: list[str],
        *,
        workdir: Path,
        allow_network: bool,
        limits: ResourceLimits,
    ) -> Launch:
        """Wrap ``argv`` (which runs in ``workdir``) in the isolation available here."""
        return Launch(argv=list(argv))

    def fingerprint(self, argv: list[str], *, allow_network: bool) -> Hashable | None:
        """What of the host a launch of ``argv`` is made from now, for a warm slot to be
        compared with at hand-out; None: this isolator's runs cannot be started ahead."""
        return None

    def layers(self, *, allow_network: bool = False) -> list[str]:
        """The layers a run gets now (for status)."""
        return []

    def report(self) -> IsolationReport:
        """``{"layers": [...], "unavailable": [{"layer", "reason", "fix"}]}`` for status."""
        return {"layers": self.layers(), "unavailable": []}
