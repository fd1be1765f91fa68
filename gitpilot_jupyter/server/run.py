"""``POST /api/sandbox/run``: one JSON envelope, or an NDJSON stream of output then the envelope;
``POST /api/sandbox/plan-and-run``: plan, approve as the caller and run, in one request;
``DELETE /api/sandbox/runs/{run_id}``: stop a run under way.

Two forms of body: ``{approval_token, session_id?}`` runs the approved plan (the
code does not cross the wire a third time); the long form ``{language, code, ...}``
is kept for compatibility and checked against the approved plan's spec.

A run stops when its caller asks (``DELETE``) or goes away: closing the
connection of a run that has not answered yet stops it too, so an interrupted
client never leaves its snippet running on the server.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from tornado import web

from ..sandbox.errors import InvalidRequest, SandboxError
from ..sandbox.request import RunOptions
from ..sandbox.results import new_run_id
from ..sandbox.rich import DISPLAY_STREAM, is_last_encoded, parse_display
from .base import SandboxHandler, authorized_execute, http_error
from .stream import Line, LineSink, StreamingHandler

#: Fields that only the long form of a run may carry.
_LONG_FORM = (
    "language",
    "code",
    "timeout_sec",
    "stdin",
    "backend",
    "allow_network",
    "env",
    "inputs",
)


def stream_line(stream: str, text: str) -> Line:
    """An NDJSON line of a run's output: ``{"type": "stdout", "data": text}``, and for a
    display output ``{"type": "display", "data": item}`` (the item an object).

    A display output the run's backend just encoded is spliced in as that text (its
    image is not encoded a second time); any other is read and encoded again.
    """
    if stream == DISPLAY_STREAM:
        item = parse_display(text)
        if is_last_encoded(text):
            return f'{{"type": {json.dumps(stream)}, "data": {text}}}'
        return {"type": stream, "data": item}
    return {"type": stream, "data": text}


class RunHandler(StreamingHandler):
    """Run an approved snippet; stream its output when the client accepts NDJSON."""

    _run_id: str | None = None

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Check the body, then let the service check approval, language, code and policy."""
        body = self.body("RunRequest")
        # The caller may choose the id (to stop the run before the answer arrives).
        run_id = self._run_id = body.pop("run_id", None) or new_run_id()
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
                await sink(stream_line(stream, text))

            stream = on_output if sink else None
            result = await self.service.run(
                body.get("approval_token"),
                self.caller(body.get("session_id")),
                expected=None if short else RunOptions.from_body(body),
                on_output=stream,
                run_id=run_id,
            )
            return result.to_dict()

        await self.answer(work)

    def on_connection_close(self) -> None:
        """The client went away before the answer: stop its run (the audit still records it)."""
        super().on_connection_close()
        if self._run_id is not None:
            with contextlib.suppress(SandboxError):  # it is over already (or never started)
                self.service.cancel(self._run_id, self.caller())
                self.log.info("sandbox run %s: the client went away; stopping it", self._run_id)


class PlanAndRunHandler(RunHandler):
    """Plan, approve (the caller is the approver, as a cell's execution is) and run.

    One request instead of plan, approve and run: what ``%%sandbox`` sends. A plan that
    needs a person's look is answered unrun (``result`` null), pending for its card.
    Stopping is :class:`RunHandler`'s (``DELETE /runs/{run_id}``, or closing the stream).
    """

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Check the body; the service plans, applies the approval rule and runs."""
        body = self.body("PlanAndRunRequest")
        run_id = self._run_id = body.pop("run_id", None) or new_run_id()
        confirmed = body.pop("confirm", False) is True

        async def work(sink: LineSink | None) -> dict[str, Any]:
            async def on_output(stream: str, text: str) -> None:
                assert sink is not None
                await sink(stream_line(stream, text))

            planned = await self.service.plan_and_run(
                RunOptions.from_body({"source": "cell", **body}),
                self.caller(body.get("session_id")),
                confirmed=confirmed,
                on_output=on_output if sink else None,
                run_id=run_id,
            )
            return planned.to_dict()

        await self.answer(work)


class RunCancelHandler(SandboxHandler):
    """``DELETE /api/sandbox/runs/{run_id}``."""

    @web.authenticated
    @authorized_execute
    async def delete(self, run_id: str) -> None:
        """Stop a run under way; its envelope then says ``cancelled``."""
        try:
            answer = self.service.cancel(run_id, self.caller())
        except SandboxError as exc:
            raise http_error(exc) from None
        self.write_json(answer)
