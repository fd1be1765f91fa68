"""Listening to a test server's sandbox audit events, as an administrator's handler would."""

from __future__ import annotations

from typing import Any

from gitpilot_jupyter.server.audit import EVENT_KINDS, schema_id

#: ``(kind, data)`` of each event, in the order the server emitted them.
AuditEvents = list[tuple[str, dict[str, Any]]]


def listen_to_audit(serverapp: Any) -> AuditEvents:
    """Every sandbox audit event ``serverapp`` emits from now on (await its
    ``event_logger.gather_listeners()`` before reading)."""
    seen: AuditEvents = []
    for kind in EVENT_KINDS:

        async def listener(
            logger: Any, schema_id: str, data: dict[str, Any], kind: str = kind
        ) -> None:
            seen.append((kind, data))

        serverapp.event_logger.add_listener(schema_id=schema_id(kind), listener=listener)
    return seen
