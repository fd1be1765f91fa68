"""Audit events: the service's ``audit`` hook emitting jupyter_events with registered schemas.

Each event kind (plan, approve, reject, claim, run, refused, cancel, config, lifecycle,
session) has a schema under ``event_schemas/<kind>/v1.yaml``. Only the fields a schema
declares are sent, so code, output or a secret added to the core's data later can never leak.
"""

from __future__ import annotations

import logging
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..sandbox.service import AuditHook

EVENT_KINDS = (
    "plan",
    "approve",
    "reject",
    "claim",
    "run",
    "refused",
    "cancel",
    "config",
    "lifecycle",
    "session",
)
SCHEMA_BASE = "https://schema.jupyter.org/gitpilot_jupyter/sandbox"


def schema_id(kind: str) -> str:
    """The ``$id`` of the schema of one event kind."""
    return f"{SCHEMA_BASE}/{kind}/v1"


def schema_path(kind: str) -> Path:
    """The YAML file of one event kind's schema."""
    return Path(str(resources.files(__package__))) / "event_schemas" / kind / "v1.yaml"


def register_schemas(event_logger: Any) -> dict[str, set[str]]:
    """Register every sandbox schema; return each kind's declared field names."""
    fields: dict[str, set[str]] = {}
    for kind in EVENT_KINDS:
        path = schema_path(kind)
        event_logger.register_event_schema(path)
        schema = yaml.safe_load(path.read_text(encoding="utf-8"))
        fields[kind] = set(schema["properties"])
    return fields


def make_audit_hook(event_logger: Any, log: logging.Logger) -> AuditHook:
    """A hook for :class:`SandboxService` that emits one event per plan, approval, run, change."""
    fields = register_schemas(event_logger)

    def audit(kind: str, data: dict[str, Any]) -> None:
        allowed = fields.get(kind)
        if allowed is None:
            log.warning("sandbox audit: no schema for event %r; it was not recorded", kind)
            return
        payload = {key: value for key, value in data.items() if key in allowed}
        try:
            event_logger.emit(schema_id=schema_id(kind), data=payload)
        except Exception:
            # An audit failure is logged loudly but never turns a finished run into a 500.
            log.exception("sandbox audit: could not emit the %s event", kind)

    return audit
