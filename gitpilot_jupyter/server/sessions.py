"""``/api/sandbox/sessions``: the caller's sessions (kernels that keep state between cells).

``GET`` lists them, ``POST`` starts one, ``DELETE /sessions/{name}`` stops it,
``POST /sessions/{name}/restart`` and ``/interrupt`` drive it. A session's cell is not
run here: it is planned with ``session`` (``POST /plan``), approved, and run by its
token through ``POST /run`` (NDJSON streaming as any run). Another identity's session
is answered 404, as an unknown one.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..sandbox.request import RunOptions
from .base import SandboxHandler, authorized_execute


class SessionsHandler(SandboxHandler):
    """``GET|POST /api/sandbox/sessions``."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """The caller's sessions, oldest first."""
        self.write_json({"sessions": self.service.sessions.list(self.caller())})

    @web.authenticated
    @authorized_execute
    async def post(self) -> None:
        """Start a session (a kernel in the sandbox) for the caller."""
        body = self.body("SessionStartRequest")
        options = RunOptions(allow_network=body.get("allow_network"))
        info = await self.call(self.service.sessions.start(body["name"], self.caller(), options))
        self.set_status(201)
        self.write_json(info)


class SessionHandler(SandboxHandler):
    """``DELETE /api/sandbox/sessions/{name}``."""

    @web.authenticated
    @authorized_execute
    async def delete(self, name: str) -> None:
        """Stop the caller's session: nothing of it is left."""
        await self.call(self.service.sessions.stop(name, self.caller()))
        self.write_json({"name": name, "stopped": True})


class SessionRestartHandler(SandboxHandler):
    """``POST /api/sandbox/sessions/{name}/restart``."""

    @web.authenticated
    @authorized_execute
    async def post(self, name: str) -> None:
        """Start the caller's session afresh: its state is gone."""
        self.body("EmptyRequest")
        self.write_json(await self.call(self.service.sessions.restart(name, self.caller())))


class SessionInterruptHandler(SandboxHandler):
    """``POST /api/sandbox/sessions/{name}/interrupt``."""

    @web.authenticated
    @authorized_execute
    async def post(self, name: str) -> None:
        """Interrupt the cell under way in the caller's session (its state stays)."""
        self.body("EmptyRequest")

        async def interrupt() -> None:
            self.service.sessions.interrupt(name, self.caller())

        await self.call(interrupt())
        self.write_json({"name": name, "interrupted": True})
