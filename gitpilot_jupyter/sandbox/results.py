"""The result envelope every backend returns and every face shows."""

from __future__ import annotations

import copy
import secrets
from dataclasses import dataclass, field, fields
from typing import Any

from .outfiles import OutFile

#: What a run's stderr ends with when the memory limit killed it, on every backend.
MEMORY_EXCEEDED = "\n[sandbox] killed: memory limit exceeded\n"


def new_run_id() -> str:
    """A fresh run id: ``run_`` + 16 hex characters."""
    return "run_" + secrets.token_hex(8)


@dataclass
class RunResult:
    """What happened to one snippet: the same fields on every backend.

    ``exit_code`` is -1 when the snippet timed out, was stopped or could not be
    launched. ``cancelled`` is True when someone stopped the run before it ended
    (Stop, a kernel interrupt, Ctrl-C, ``DELETE /api/sandbox/runs/{run_id}``, a
    closed stream); the output produced until then is kept, as on a timeout.
    ``isolation`` lists only the layers that were really in force; ``notes`` says
    which limits were not enforced as asked. ``warm`` is True when the run used a
    sandbox started ahead of it (the warm pool; same isolation as a cold start).
    """

    backend: str
    language: str
    command: list[str]
    exit_code: int
    stdout: str = ""
    stderr: str = ""
    duration_ms: int = 0
    truncated: bool = False
    timed_out: bool = False
    cancelled: bool = False
    sandbox_id: str | None = None
    run_id: str = field(default_factory=new_run_id)
    plan_id: str | None = None
    isolation: list[str] = field(default_factory=list)
    #: What the backend did differently from what was asked (a resource limit it
    #: raised or could not apply), one sentence each; empty when nothing differs.
    notes: list[str] = field(default_factory=list)
    warm: bool = False
    #: The run's display outputs, in order (see :mod:`.rich`): each
    #: ``{"output_type": "display_data", "data": {mime: value}, "metadata": {...},
    #: "stdout_at": N}``, ``N`` the characters of ``stdout`` before it.
    outputs: list[dict[str, Any]] = field(default_factory=list)
    #: The files the run left under ``out/`` and handed back (name relative to ``out/``,
    #: size, ``sha256:`` hex), in the order collected; what was left out is in ``notes``.
    #: Their bytes: ``GET /api/sandbox/runs/{run_id}/files/{name}``, for the run's owner.
    files: list[OutFile] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the snippet exited 0 and was not killed."""
        return self.exit_code == 0 and not self.timed_out and not self.cancelled

    def to_dict(self) -> dict[str, Any]:
        """The JSON envelope: every field, in order, its lists copied (``dataclasses.asdict``
        without its generic deep copy: each field is a string, a number, a bool, None, a
        list of strings or a list of flat records, each copied; the outputs, dicts, are
        copied whole)."""
        envelope = {
            name: _copied(value) if isinstance(value, list) else value
            for name, value in zip(_FIELDS, map(self.__getattribute__, _FIELDS), strict=True)
        }
        if self.outputs:  # dicts: copied whole (their strings, an image's too, are shared)
            envelope["outputs"] = copy.deepcopy(self.outputs)
        return envelope

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunResult:
        """Rebuild an envelope received as JSON (unknown keys are ignored)."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        return cls(**known)


_FIELDS = tuple(f.name for f in fields(RunResult))


def _copied(items: list[Any]) -> list[Any]:
    """A copy of a list of the envelope: its flat records (``files``) copied too."""
    return [dict(item) if isinstance(item, dict) else item for item in items]


def result_badges(result: RunResult) -> str:
    """``backend · exit N · 12 ms`` plus ``stopped`` / ``timed out`` / ``truncated``: one line."""
    parts = [result.backend, f"exit {result.exit_code}", f"{result.duration_ms} ms"]
    if result.cancelled:
        parts.append("stopped")
    if result.timed_out:
        parts.append("timed out")
    if result.truncated:
        parts.append("output truncated")
    return " · ".join(parts)
