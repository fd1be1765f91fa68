"""The backend interface every sandbox implements."""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .errors import SandboxError
from .inputs import StagedInput
from .outfiles import OutCaps
from .output import DEFAULT_OUTPUT_CAP
from .results import RunResult, new_run_id
from .rich import DisplayCaps

#: Called with ``("stdout" | "stderr", text)`` as output is produced, and with
#: ``(rich.DISPLAY_STREAM, json)`` for each display output kept.
OutputCallback = Callable[[str, str], Awaitable[None]]


#: The size cap of a run's writable space (run folder, /tmp, /dev/shm), in MiB.
DEFAULT_DISK_MB = 256


@dataclass(frozen=True)
class ResourceLimits:
    """Per-run resource limits for the local backend's OS isolation."""

    memory_mb: int = 1024
    max_processes: int = 256
    max_file_size_mb: int = 128
    disk_mb: int = DEFAULT_DISK_MB
    #: The caps on the run's display outputs (see :mod:`.rich`).
    display: DisplayCaps = field(default_factory=DisplayCaps)


@dataclass
class RunRequest:
    """One approved snippet, with the policy already applied to it."""

    language: str
    code: str
    timeout_sec: int
    stdin: str | None = None
    allow_network: bool = False
    env: dict[str, str] = field(default_factory=dict)
    max_output_bytes: int = DEFAULT_OUTPUT_CAP
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    run_id: str = field(default_factory=new_run_id)
    plan_id: str | None = None
    #: For a file run, the approved file on this machine: a backend may send its folder
    #: along. What runs is always ``code``, as approved, never the file's current text.
    file: Path | None = None
    #: For code its caller read from a file: that file's name, which the run takes (only
    #: the name: nothing of the file is sent).
    filename: str | None = None
    #: The files and folders handed to the run, copied and checked against the plan: each
    #: appears at ``./NAME`` in the run folder (read-only where the engine can make it so).
    inputs: tuple[StagedInput, ...] = ()
    #: Set when someone stops the run: the backend kills it and answers ``cancelled=True``
    #: with the output so far. A backend that ignores it is cancelled by the service.
    stop: asyncio.Event | None = field(default=None, repr=False, compare=False)
    #: Where the backend copies what the run leaves under ``out/`` (an empty 0700 folder
    #: of the service's; None: nothing is collected), within ``out_caps``.
    out_dir: Path | None = None
    out_caps: OutCaps = field(default_factory=OutCaps)

    @property
    def named_after(self) -> str | Path | None:
        """The file the run is named after: a file run's, or the one its code was read from."""
        return self.file or self.filename


class SandboxBackend(abc.ABC):
    """A place where snippets run. Subclasses are async and never block the loop."""

    name: ClassVar[str]

    @abc.abstractmethod
    async def run(self, request: RunRequest, on_output: OutputCallback | None = None) -> RunResult:
        """Run one snippet; deliver output to ``on_output`` as it is produced."""

    def isolation(self) -> list[str]:
        """The isolation layers a run on this backend gets now."""
        return []

    def refusal(self, *, allow_network: bool = False) -> SandboxError | None:
        """Why this backend will not run a snippet here now (None: it will).

        Plans ask before anyone approves, and runs again before they start.
        """
        return None

    def hands_back_files(self) -> bool:
        """True when a run's ``out/`` files come back (copied into ``RunRequest.out_dir``,
        listed in ``RunResult.files``); plans say whether they do."""
        return False

    def display_command(self, language: str, file: str | None = None) -> list[str] | None:
        """The command plans and results show when the backend names it (None: the default).

        ``file`` is the plan's file for a file run.
        """
        return None

    def kept(self) -> str | None:
        """What the backend's host keeps of each run that this server cannot remove, as
        status shows it (None: nothing is kept)."""
        return None

    def limit_notes(self, limits: ResourceLimits) -> list[str]:
        """The limits this backend cannot enforce as asked, one sentence each (plans show them)."""
        return []

    async def health(self) -> dict[str, Any]:
        """``{"ok": bool, "error": str | None, ...}`` for status."""
        return {"ok": True, "error": None}

    async def aclose(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release connections; the default has nothing to release."""
