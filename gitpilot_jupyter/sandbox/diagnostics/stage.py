"""One diagnostics stage: PASS / FAIL / SKIP, what was seen, and the command that fixes it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..request import RunOptions
    from ..results import RunResult
    from ..service import SandboxService

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


async def run_probe(probe: SandboxService, options: RunOptions) -> RunResult:
    """Plan, approve and run a diagnostic snippet: the walk itself is the approver.

    A blocked plan raises :class:`~..errors.PlanBlocked`; a high warning does not stop
    it (``confirmed``: the walk has looked).
    """
    planned = await probe.plan_and_run(options, approved_by="user", confirmed=True)
    assert planned.result is not None  # confirmed: nothing waits for a look
    return planned.result
