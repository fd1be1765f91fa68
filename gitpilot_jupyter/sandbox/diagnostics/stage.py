"""One diagnostics stage: PASS / FAIL / SKIP, what was seen, and the command that fixes it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass
class Stage:
    """One step of the walk: PASS / FAIL / SKIP, what was seen, and the fix for a failure."""

    name: str
    status: str
    detail: str
    fix: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The stage as JSON."""
        return asdict(self)
