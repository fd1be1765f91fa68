"""``POST /api/sandbox/run``: one JSON envelope, or an NDJSON stream of output then the envelope.

Two forms of body: ``{approval_token, session_id?}`` runs the approved plan (the
code does not cross the wire a third time); the long form ``{language, code, ...}``
is kept for compatibility and checked against the approved plan's spec.
"""

from __future__ import annotations

from typing import Any

from tornado import web

from ..sandbox.errors import InvalidRequest
from .base import authorized_execute, http_error
from .stream import LineSink, StreamingHandler

#: Fields that only the long form of a run may carry.
_LONG_FORM = ("language", "code", "timeout_sec", "stdin", "backend", "allow_network", "env")


class RunHandler(StreamingHandler):
    """Run an approved snippet; stream its output when the client accepts NDJSON."""

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Check the body, then let the service check approval, language, code and policy."""
        body = self.body("RunRequest")
        short = not any(key in body for key in _LONG_FORM)
        if not short and not {"language", "code"} <= body.keys():
            missing = "language" if "language" not in body else "code"
            raise http_error(
                InvalidRequest(
                    f"{missing} is required; or send the approval_token alone to run the "
                    "approved plan",
                    code="missing_field",
                )
            )

        async def work(sink: LineSink | None) -> dict[str, Any]:
            async def on_output(stream: str, text: str) -> None:
                assert sink is not None
                await sink({"type": stream, "data": text})

            stream = on_output if sink else None
            if short:
                result = await self.service.run_approved(
                    body.get("approval_token"),
                    session_id=body.get("session_id"),
                    user=self.username,
                    on_output=stream,
                )
            else:
                result = await self.service.run(**body, user=self.username, on_output=stream)
            return result.to_dict()

        await self.answer(work)
