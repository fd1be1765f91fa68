"""The approval mode of agent runs: ``ask`` (default), ``auto`` or ``deny``.

* ``ask``: the agent's plan waits until a human approves it (JupyterLab, a
  notebook, or ``jupyter sandbox approve PLAN_ID``); the agent can wait for it.
* ``auto``: the agent approves its own plans in-process; the approval is
  recorded as ``approved_by="agent"`` in the audit events. Policy still applies:
  a blocked plan never runs.
* ``deny``: agents cannot run anything.

Resolution: explicit argument > ``GITPILOT_AGENT_APPROVAL`` > ``ask``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..sandbox.errors import InvalidSetting

APPROVAL_ENV = "GITPILOT_AGENT_APPROVAL"
APPROVAL_MODES = ("ask", "auto", "deny")
DEFAULT_APPROVAL = "ask"


def check_mode(value: object) -> str:
    """``value`` as a canonical mode, or :class:`InvalidSetting` naming the accepted ones."""
    mode = str(value).strip().lower()
    if mode not in APPROVAL_MODES:
        raise InvalidSetting(
            f"unknown agent approval mode {value!r}; expected one of {list(APPROVAL_MODES)}",
            code="invalid_approval_mode",
        )
    return mode


def resolve_mode(explicit: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The mode and where it came from (for messages): argument, env var or default."""
    if explicit is not None:
        return check_mode(explicit), "set explicitly"
    raw = environ.get(APPROVAL_ENV, "").strip()
    if raw:
        return check_mode(raw), f"set by {APPROVAL_ENV}"
    return DEFAULT_APPROVAL, "the default"
