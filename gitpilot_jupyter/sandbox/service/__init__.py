"""The core's orchestration layer: the door and the parts it holds.

Each module here composes the records and rules one level down (the top-level
modules of :mod:`gitpilot_jupyter.sandbox`: plans, spec, policy, settings, ...)
with the stores and backends for one request; none of those imports back up
here (an import contract in ``pyproject.toml`` keeps it so).

* :mod:`~gitpilot_jupyter.sandbox.service.service`:
  :class:`~gitpilot_jupyter.sandbox.service.service.SandboxService`, the one door every face calls.
* ``resolver``, ``planner``, ``workflow``, ``runs``, ``status``: the parts the door holds.
"""

from .service import (
    MAX_CODE_CHARS,
    REQUIRE_APPROVAL_ENV,
    RUN_ID_PATTERN,
    STOP_GRACE_SEC,
    ActiveRun,
    AuditHook,
    SandboxService,
    approval_required_by_env,
    check_run_id,
)

__all__ = [
    "MAX_CODE_CHARS",
    "REQUIRE_APPROVAL_ENV",
    "RUN_ID_PATTERN",
    "STOP_GRACE_SEC",
    "ActiveRun",
    "AuditHook",
    "SandboxService",
    "approval_required_by_env",
    "check_run_id",
]
