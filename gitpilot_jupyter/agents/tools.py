"""``run_in_sandbox``, ``run_command`` and sessions for agents, through plan -> approve -> run.

:class:`AgentSandbox` is the configurable object (approval mode, which server,
how much output a model sees); it answers :class:`AgentReply` objects whose
``text`` is what a model should read. Every run goes through the same service
path, policy and approval gate as a person's ▶ Run; so does every cell of a
session (``open_session``, ``run_in_session``, ``close_session``,
``list_sessions``: the client's session calls, the REST ``/api/sandbox/sessions``).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..client.base import SandboxClient
from ..client.local import LocalClient
from ..client.resolve import make_client
from ..sandbox.claims import AgentPlan
from ..sandbox.errors import InvalidSetting, SandboxError
from ..sandbox.inputs import absolute_paths
from ..sandbox.plans import MAX_PENDING_PLANS, ExecutionPlan
from ..sandbox.request import RunOptions
from ..sandbox.results import RunResult
from ..sandbox.service import SandboxService
from ..sandbox.sync import run_sync
from . import render
from .approval import resolve_mode

#: Seconds ``ask`` mode waits for a human inside the tool call before answering "pending".
DEFAULT_APPROVAL_WAIT_SEC = 0.0
#: Longest single wait a caller may ask for.
MAX_APPROVAL_WAIT_SEC = 3600.0
#: How the name of a session an agent opens without naming it begins.
SESSION_PREFIX = "agent-"
_GONE_CODES = ("plan_not_found", "not_found")
T = TypeVar("T")


@dataclass
class AgentReply:
    """What a tool call did, as text for a model and as data for programs.

    ``status``: ``completed`` (it ran; see ``result``), ``approval_pending``,
    ``refused`` (policy), ``denied`` (mode ``deny``), ``not_approved`` (rejected
    or expired) or ``error`` (the request was invalid or the sandbox unreachable).
    """

    status: str
    text: str
    plan: dict[str, Any] | None = None
    result: RunResult | None = None
    error_code: str | None = None
    #: The sessions a session tool answered about (``open_session``: the one opened,
    #: ``list_sessions``: each), as ``GET /api/sandbox/sessions`` lists them.
    sessions: list[dict[str, Any]] | None = None

    @property
    def ok(self) -> bool:
        """True when the snippet ran, exited 0 and was not killed."""
        return self.result is not None and self.result.ok

    @property
    def images(self) -> list[tuple[str, str]]:
        """The run's images a model gets, as ``(MIME type, base64 data)`` (the text says
        which output each one is)."""
        if self.result is None:
            return []
        return [(mime, data) for _, mime, data in render.model_images(self.result.outputs)]

    @property
    def plan_id(self) -> str | None:
        """The plan's id, when one was made."""
        return None if self.plan is None else str(self.plan["plan_id"])

    def __str__(self) -> str:
        return self.text

    def to_dict(self, limit: int | None = None) -> dict[str, Any]:
        """Structured content (MCP, JSON logs): status, plan id, result envelope, error code.

        With ``limit``, stdout and stderr are shortened (head and tail) as in ``text``, and
        so are the display outputs' texts; their images are sizes (see :attr:`images`).
        """
        envelope = None if self.result is None else self.result.to_dict()
        if envelope is not None and limit is not None:
            for stream in ("stdout", "stderr"):
                envelope[stream] = render.shorten(envelope[stream], limit)
            envelope["outputs"] = render.outputs_for_model(envelope["outputs"], limit)
        return {
            "status": self.status,
            "ok": self.ok,
            "plan_id": self.plan_id,
            "result": envelope,
            "error_code": self.error_code,
            "sessions": self.sessions,
        }


def _sync(call: Coroutine[Any, Any, T]) -> T:
    """``call`` from synchronous code, on the one loop every such call of the process
    uses: an in-process session's kernel lives on the loop that started it."""
    return run_sync(call, keep_loop=True)


def _error(exc: SandboxError) -> AgentReply:
    return AgentReply("error", render.render_error(exc.code, exc.message), error_code=exc.code)


class AgentSandbox:
    """The sandbox as an agent sees it.

    ``approval``: ``ask`` | ``auto`` | ``deny`` (else ``GITPILOT_AGENT_APPROVAL``, else ``ask``).
    ``server``: ``auto`` (the env vars, else a running Jupyter server with the sandbox
    extension, else in-process), ``local``, or a server URL (with ``token``).
    ``service``: drive this service in-process, e.g. the Jupyter server's own when the
    agent runs inside the server (its plans then show in JupyterLab).
    ``approval_wait_sec``: how long a call in ``ask`` mode waits for the human before
    answering "pending" (0: answer at once; the agent then calls ``wait_for_approval``).
    ``max_output_bytes``: per stream, what the model sees (head and tail).

    Inside a running event loop (e.g. in the Jupyter server) use the ``async_*`` methods;
    the plain ones are for synchronous callers.
    """

    def __init__(
        self,
        *,
        approval: str | None = None,
        server: str | None = None,
        token: str | None = None,
        service: SandboxService | None = None,
        approval_wait_sec: float = DEFAULT_APPROVAL_WAIT_SEC,
        max_output_bytes: int = render.MODEL_OUTPUT_BYTES,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.environ = os.environ if environ is None else environ
        self.mode, self.mode_source = resolve_mode(approval, self.environ)
        if not 0 <= approval_wait_sec <= MAX_APPROVAL_WAIT_SEC:
            raise InvalidSetting(f"approval_wait_sec must be within 0..{MAX_APPROVAL_WAIT_SEC:g}")
        self.approval_wait_sec = approval_wait_sec
        self.max_output_bytes = max_output_bytes
        self._server = (server or "auto").strip()
        self._token = token
        self._client: SandboxClient | None = None
        if service is not None:
            self._client = LocalClient(service, shared=True, user=None)
        #: Plans this agent waits for; the claim secrets never leave this object.
        self._tickets: dict[str, tuple[AgentPlan, str | None]] = {}

    async def client(self) -> SandboxClient:
        """The way to the sandbox, found once (``auto``: a Jupyter server if any, else here)."""
        if self._client is None:
            self._client = await asyncio.to_thread(  # auto probes servers
                make_client,
                self._server,
                self._token or "",
                environ=self.environ,
                search=True,
                service=SandboxService(),
                user="agent",
            )
        return self._client

    # -- the tools --------------------------------------------------------------------

    async def async_run_in_sandbox(
        self,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        env: Sequence[str] | None = None,
        inputs: Sequence[str] | None = None,
    ) -> AgentReply:
        """Plan ``code`` in ``language``; run it as the approval mode allows.

        ``env``: names of server variables to pass to the snippet (shown in the plan): only
        those on the administrator's list for agents (``agent_env_allowlist``, else
        ``GITPILOT_SANDBOX_AGENT_ENV_ALLOWLIST``); any other name is an ``env_not_allowed``
        error, and the product's own secrets are never passed. ``inputs``: paths of files
        and folders (from this process's folder) the snippet finds as ``./NAME``; the plan
        lists each, so a person approving sees what goes in.
        """
        return await self._execute(language, code, timeout_sec, shown=None, env=env, inputs=inputs)

    async def async_run_command(
        self,
        command: str,
        timeout_sec: int | None = None,
        env: Sequence[str] | None = None,
        inputs: Sequence[str] | None = None,
    ) -> AgentReply:
        """A bash command line, run as a bash snippet (``inputs`` as for run_in_sandbox)."""
        shown = command.strip().splitlines()[0][:200] if command.strip() else command
        return await self._execute(
            "bash", command, timeout_sec, shown=shown, env=env, inputs=inputs
        )

    # -- sessions: cells that keep their state ------------------------------------------

    async def async_open_session(self, name: str | None = None) -> AgentReply:
        """Open a session (a Python kernel in the sandbox that keeps its state between
        cells) named ``name`` (default: a fresh ``agent-`` name), with the settings'
        network and limits. Nothing of the agent's runs yet: each cell is planned and
        approved as a run (:meth:`async_run_in_session`)."""
        if self.mode == "deny":
            return AgentReply("denied", render.render_denied(self.mode_source))
        name = name or f"{SESSION_PREFIX}{secrets.token_hex(4)}"
        try:
            info = await (await self.client()).start_session(name)
        except SandboxError as exc:
            return _error(exc)
        return AgentReply("completed", render.render_session_opened(info), sessions=[info])

    async def async_run_in_session(
        self,
        session: str,
        code: str,
        timeout_sec: int | None = None,
        inputs: Sequence[str] | None = None,
    ) -> AgentReply:
        """Plan a python cell in ``session`` and run it there as the approval mode allows
        (as :meth:`async_run_in_sandbox`): the plan names the session, and the cell sees
        what the session's earlier cells left (variables, imports, files). A session not
        open yet is opened by its first cell. ``inputs`` as for run_in_sandbox: each is
        ``./NAME`` in the session's folder from this cell on (read-only); what the cell
        writes or changes under ``out/`` comes back in its result."""
        return await self._execute(
            "python", code, timeout_sec, shown=None, inputs=inputs, session=session
        )

    async def async_close_session(self, session: str) -> AgentReply:
        """Stop ``session``: its kernel, processes and files are gone."""
        try:
            await (await self.client()).stop_session(session)
        except SandboxError as exc:
            return _error(exc)
        return AgentReply("completed", render.render_session_closed(session))

    async def async_list_sessions(self) -> AgentReply:
        """The sessions this agent's identity has open, oldest first."""
        try:
            listed = await (await self.client()).sessions()
        except SandboxError as exc:
            return _error(exc)
        return AgentReply("completed", render.render_sessions(listed), sessions=listed)

    async def _execute(
        self,
        language: str,
        code: str,
        timeout_sec: int | None,
        shown: str | None,
        env: Sequence[str] | None = None,
        inputs: Sequence[str] | None = None,
        session: str | None = None,
    ) -> AgentReply:
        if self.mode == "deny":
            return AgentReply("denied", render.render_denied(self.mode_source))
        try:
            client = await self.client()
            options = RunOptions(
                language=language,
                code=code,
                timeout_sec=timeout_sec,
                env=env or (),
                inputs=absolute_paths(inputs),
                session=session,
            )
            ticket = await client.plan_for_agent(options, auto_approve=self.mode == "auto")
        except SandboxError as exc:
            return _error(exc)
        plan = ticket.plan
        if plan.blocked:
            text = render.render_blocked(plan, command=shown)
            return AgentReply("refused", text, plan=plan.to_dict())
        if self.mode == "auto":
            return await self._run(client, plan, ticket.approval_token, shown)
        self._tickets[ticket.plan.plan_id] = (ticket, shown)
        while len(self._tickets) > MAX_PENDING_PLANS:  # the store has evicted those plans anyway
            del self._tickets[next(iter(self._tickets))]
        if self.approval_wait_sec > 0:
            return await self.async_wait_for_approval(ticket.plan.plan_id, self.approval_wait_sec)
        return self._pending(client, plan)

    def _pending(self, client: SandboxClient, plan: ExecutionPlan) -> AgentReply:
        text = render.render_pending(plan, where=client.where, in_process=client.in_process)
        return AgentReply("approval_pending", text, plan=plan.to_dict())

    async def _run(
        self, client: SandboxClient, plan: ExecutionPlan, token: str | None, shown: str | None
    ) -> AgentReply:
        try:
            result = await client.run(token or "")
        except SandboxError as exc:
            reply = _error(exc)
            reply.plan = plan.to_dict()
            return reply
        text = render.render_result(
            result,
            command=shown,
            timeout_sec=plan.spec.timeout_sec,
            limit=self.max_output_bytes,
            session=plan.spec.session,
        )
        return AgentReply("completed", text, plan=plan.to_dict(), result=result)

    async def async_wait_for_approval(
        self, plan_id: str, wait_sec: float | None = None
    ) -> AgentReply:
        """Wait up to ``wait_sec`` for a human to approve ``plan_id``; run it once approved."""
        entry = self._tickets.get(plan_id)
        if entry is None:
            return AgentReply(
                "error",
                render.render_error(
                    "unknown_plan", f"this agent is not waiting for a plan {plan_id!r}"
                ),
                error_code="unknown_plan",
            )
        ticket, shown = entry
        client = await self.client()
        plan = ticket.plan
        wait = self.approval_wait_sec if wait_sec is None else wait_sec
        wait = min(max(0.0, float(wait)), MAX_APPROVAL_WAIT_SEC)
        deadline = time.monotonic() + wait
        delay = 0.1
        while True:
            try:
                answer = await client.claim(plan_id, ticket.claim or "")
            except SandboxError as exc:
                if exc.code not in _GONE_CODES:
                    return _error(exc)
                del self._tickets[plan_id]
                text = render.render_not_approved(plan_id, "it was rejected, or evicted")
                return AgentReply("not_approved", text, plan=plan.to_dict(), error_code=exc.code)
            if answer.state == "approved":
                del self._tickets[plan_id]
                return await self._run(client, plan, answer.approval_token, shown)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                text = render.render_still_pending(plan_id, wait)
                return AgentReply("approval_pending", text, plan=plan.to_dict())
            # Poll gently: a person takes seconds, the server should not see a busy loop.
            await asyncio.sleep(min(delay, remaining))
            delay = min(delay * 2, 1.0)

    async def async_status(self) -> AgentReply:
        """The sandbox status as text (backend, health, approval mode, where plans go)."""
        try:
            client = await self.client()
            status = await client.status()
        except SandboxError as exc:
            return _error(exc)
        where = "in-process (no Jupyter server)" if client.in_process else client.where
        text = render.render_status(status, mode=f"{self.mode} ({self.mode_source})", where=where)
        return AgentReply("completed", text)

    # -- a person's side, for host applications -----------------------------------------

    async def async_approve(self, plan_id: str) -> dict[str, Any]:
        """Approve ``plan_id`` as a person (the host application's approve button)."""
        return await (await self.client()).approve(plan_id, for_planner=True)

    async def async_reject(self, plan_id: str) -> None:
        """Reject ``plan_id``: the agent's wait ends with ``not_approved``."""
        await (await self.client()).reject(plan_id)

    # -- synchronous wrappers ---------------------------------------------------------

    def run_in_sandbox(
        self,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        env: Sequence[str] | None = None,
        inputs: Sequence[str] | None = None,
    ) -> AgentReply:
        """Synchronous :meth:`async_run_in_sandbox`."""
        return _sync(self.async_run_in_sandbox(language, code, timeout_sec, env, inputs))

    def run_command(
        self,
        command: str,
        timeout_sec: int | None = None,
        env: Sequence[str] | None = None,
        inputs: Sequence[str] | None = None,
    ) -> AgentReply:
        """Synchronous :meth:`async_run_command`."""
        return _sync(self.async_run_command(command, timeout_sec, env, inputs))

    def open_session(self, name: str | None = None) -> AgentReply:
        """Synchronous :meth:`async_open_session`."""
        return _sync(self.async_open_session(name))

    def run_in_session(
        self,
        session: str,
        code: str,
        timeout_sec: int | None = None,
        inputs: Sequence[str] | None = None,
    ) -> AgentReply:
        """Synchronous :meth:`async_run_in_session`."""
        return _sync(self.async_run_in_session(session, code, timeout_sec, inputs))

    def close_session(self, session: str) -> AgentReply:
        """Synchronous :meth:`async_close_session`."""
        return _sync(self.async_close_session(session))

    def list_sessions(self) -> AgentReply:
        """Synchronous :meth:`async_list_sessions`."""
        return _sync(self.async_list_sessions())

    def wait_for_approval(self, plan_id: str, wait_sec: float | None = None) -> AgentReply:
        """Synchronous :meth:`async_wait_for_approval`."""
        return _sync(self.async_wait_for_approval(plan_id, wait_sec))

    def status(self) -> AgentReply:
        """Synchronous :meth:`async_status`."""
        return _sync(self.async_status())

    def approve(self, plan_id: str) -> dict[str, Any]:
        """Synchronous :meth:`async_approve`."""
        return _sync(self.async_approve(plan_id))

    def reject(self, plan_id: str) -> None:
        """Synchronous :meth:`async_reject`."""
        _sync(self.async_reject(plan_id))
