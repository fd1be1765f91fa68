"""The kernel's way to the sandbox: the core in-process, or the REST API of a Jupyter server.

Both clients give the same plans, the same envelopes and raise the same typed
errors (:class:`~gitpilot_jupyter.sandbox.errors.SandboxError` with the core's
``code``), so the magic and the widgets never care which path runs.
"""

from __future__ import annotations

import abc
import json
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from ..sandbox.backends.base import OutputCallback
from ..sandbox.errors import SandboxError
from ..sandbox.plans import ExecutionPlan
from ..sandbox.results import RunResult
from ..sandbox.service import SandboxService

API = "api/sandbox"
LIFECYCLE_ACTIONS = ("status", "install", "start", "stop")

#: Receives install's pull progress events (``{"image", "status", ...}``).
ProgressCallback = Callable[[dict[str, Any]], Awaitable[None]]


class ServerUnreachable(SandboxError):
    """The Jupyter server chosen for the REST path did not answer."""

    code = "server_unreachable"
    status = 503


def plan_from_dict(data: Mapping[str, Any]) -> ExecutionPlan:
    """An :class:`ExecutionPlan` from the JSON the REST API answers."""
    known = ExecutionPlan.__dataclass_fields__
    return ExecutionPlan(**{k: v for k, v in data.items() if k in known})


class SandboxClient(abc.ABC):
    """Plan, approve and run snippets, read and change settings, manage MatrixLab."""

    #: Which path runs, as the footer names it.
    path: str = ""

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id or "kernel-" + uuid.uuid4().hex[:12]

    @abc.abstractmethod
    async def plan(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        stdin: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
    ) -> ExecutionPlan:
        """Plan a notebook cell's snippet."""

    @abc.abstractmethod
    async def approve(self, plan: ExecutionPlan, *, approved_by: str = "user") -> str | None:
        """Approve ``plan``; the approval token (``None`` when the service needs none)."""

    @abc.abstractmethod
    async def run(
        self,
        plan: ExecutionPlan,
        *,
        token: str | None,
        stdin: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        """Run an approved plan, streaming its output to ``on_output``."""

    @abc.abstractmethod
    async def status(self) -> dict[str, Any]:
        """The service status (backend, masked settings, health, env override...)."""

    @abc.abstractmethod
    async def configure(self, changes: Mapping[str, object]) -> dict[str, Any]:
        """Persist a subset of settings; answer the new status."""

    @abc.abstractmethod
    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """Test connection to a MatrixLab Runner (unsaved url / token allowed)."""

    @abc.abstractmethod
    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        """``status`` (inspection) or ``install`` / ``start`` / ``stop`` of the Runner.

        ``progress`` receives install's pull events where the path can deliver them.
        """

    async def run_approved(
        self, plan: ExecutionPlan, *, stdin: str | None, on_output: OutputCallback | None
    ) -> RunResult:
        """Approve (the cell's execution is the approval) and run."""
        token = await self.approve(plan, approved_by="cell")
        return await self.run(plan, token=token, stdin=stdin, on_output=on_output)


class LocalClient(SandboxClient):
    """The core in the kernel process."""

    path = "in-process"

    def __init__(self, service: SandboxService | None = None, session_id: str | None = None):
        super().__init__(session_id)
        self.service = service or SandboxService(root_dir=Path.cwd())

    async def plan(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        stdin: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
    ) -> ExecutionPlan:
        return await self.service.plan(
            language=language,
            code=code,
            source="cell",
            timeout_sec=timeout_sec,
            stdin=stdin,
            session_id=self.session_id,
            backend=backend,
            allow_network=allow_network,
        )

    async def approve(self, plan: ExecutionPlan, *, approved_by: str = "user") -> str | None:
        if not plan.requires_approval:
            return None
        answer = await self.service.approve(
            plan.plan_id, session_id=self.session_id, approved_by=approved_by
        )
        return str(answer["approval_token"])

    async def run(
        self,
        plan: ExecutionPlan,
        *,
        token: str | None,
        stdin: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        return await self.service.run(
            language=plan.language,
            code=plan.code,
            timeout_sec=plan.timeout_sec,
            stdin=stdin,
            approval_token=token,
            session_id=self.session_id,
            backend=plan.backend,
            allow_network=plan.network,
            on_output=on_output,
        )

    async def status(self) -> dict[str, Any]:
        return await self.service.status()

    async def configure(self, changes: Mapping[str, object]) -> dict[str, Any]:
        return await self.service.configure(changes, user="kernel")

    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        return await self.service.test_matrixlab(url=url, token=token)

    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        if action not in LIFECYCLE_ACTIONS:
            raise SandboxError(f"unknown lifecycle action {action!r}", code="invalid_request")
        if action == "status":
            return await self.service.lifecycle_status()
        if action == "install":
            return await self.service.lifecycle_install(progress, user="kernel")
        if action == "start":
            return await self.service.lifecycle_start(user="kernel")
        return await self.service.lifecycle_stop(user="kernel")


class RestClient(SandboxClient):
    """The sandbox REST API of a Jupyter server (approvals and audit live there)."""

    def __init__(
        self,
        base_url: str,
        token: str = "",
        *,
        session_id: str | None = None,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(session_id)
        self.base_url = base_url.rstrip("/") + "/"
        self.token = token
        self.timeout = timeout
        self.path = "REST"

    def _client(self, read_timeout: float | None = None) -> httpx.AsyncClient:
        headers = {"Authorization": f"token {self.token}"} if self.token else {}
        timeout = httpx.Timeout(self.timeout, read=read_timeout or self.timeout)
        return httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout)

    @staticmethod
    def _error(response: httpx.Response) -> SandboxError:
        try:
            body = response.json()
        except ValueError:
            body = {}
        message = body.get("message") if isinstance(body, dict) else None
        code = body.get("code") if isinstance(body, dict) else None
        error = SandboxError(
            str(message or f"the Jupyter server answered {response.status_code}"),
            code=str(code or "server_error"),
        )
        error.status = response.status_code
        return error

    async def _call(self, method: str, route: str, body: Any = None) -> Any:
        try:
            async with self._client() as client:
                response = await client.request(method, f"{API}/{route}", json=body)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(
                f"cannot reach the Jupyter server at {self.base_url}: {exc}"
            ) from None
        if response.status_code >= 400:
            raise self._error(response)
        return response.json()

    async def plan(
        self,
        *,
        language: str,
        code: str,
        timeout_sec: int | None = None,
        stdin: str | None = None,
        backend: str | None = None,
        allow_network: bool | None = None,
    ) -> ExecutionPlan:
        body: dict[str, Any] = {
            "language": language,
            "code": code,
            "source": "cell",
            "session_id": self.session_id,
        }
        optional = {
            "timeout_sec": timeout_sec,
            "stdin": stdin,
            "backend": backend,
            "allow_network": allow_network,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        answer = await self._call("POST", "plan", body)
        plan = plan_from_dict(answer["plan"])
        plan.stdin, plan.session_id = stdin, self.session_id
        return plan

    async def approve(self, plan: ExecutionPlan, *, approved_by: str = "user") -> str | None:
        if not plan.requires_approval:
            return None
        body = {"plan_id": plan.plan_id, "session_id": self.session_id}
        answer = await self._call("POST", "approve", body)
        return str(answer["approval_token"])

    async def run(
        self,
        plan: ExecutionPlan,
        *,
        token: str | None,
        stdin: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        body: dict[str, Any] = {
            "language": plan.language,
            "code": plan.code,
            "timeout_sec": plan.timeout_sec,
            "session_id": self.session_id,
            "backend": plan.backend,
            "allow_network": plan.network,
        }
        if stdin is not None:
            body["stdin"] = stdin
        if token is not None:
            body["approval_token"] = token
        headers = {"Accept": "application/x-ndjson"}
        try:
            async with (
                self._client(read_timeout=plan.timeout_sec + self.timeout) as client,
                client.stream("POST", f"{API}/run", json=body, headers=headers) as response,
            ):
                if response.status_code >= 400:
                    await response.aread()
                    raise self._error(response)
                if "ndjson" not in response.headers.get("content-type", ""):
                    # A server without streaming: the whole envelope at once.
                    result = RunResult.from_dict(json.loads(await response.aread()))
                    await _replay(result, on_output)
                    return result
                async for line in response.aiter_lines():
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    kind = event.pop("type", None)
                    if kind in ("stdout", "stderr") and on_output is not None:
                        await on_output(kind, str(event.get("data", "")))
                    elif kind == "result":
                        return RunResult.from_dict(event)
                    elif kind == "error":
                        raise SandboxError(
                            str(event.get("message", "the run failed")),
                            code=str(event.get("code", "server_error")),
                        )
        except httpx.HTTPError as exc:
            raise ServerUnreachable(f"lost the Jupyter server at {self.base_url}: {exc}") from None
        raise SandboxError("the server's run stream ended without a result", code="server_error")

    async def status(self) -> dict[str, Any]:
        return dict(await self._call("GET", "status"))

    async def configure(self, changes: Mapping[str, object]) -> dict[str, Any]:
        return dict(await self._call("PUT", "config", dict(changes)))

    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        body = {k: v for k, v in {"matrixlab_url": url, "matrixlab_token": token}.items() if v}
        return dict(await self._call("POST", "matrixlab/test", body))

    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        if action not in LIFECYCLE_ACTIONS:
            raise SandboxError(f"unknown lifecycle action {action!r}", code="invalid_request")
        if action == "status":
            return dict(await self._call("GET", "matrixlab/lifecycle"))
        return dict(await self._call("POST", f"matrixlab/{action}", {}))


async def _replay(result: RunResult, on_output: OutputCallback | None) -> None:
    if on_output is None:
        return
    for stream in ("stdout", "stderr"):
        text = getattr(result, stream)
        if text:
            await on_output(stream, text)


def server_answers(url: str, token: str, timeout: float = 3.0) -> bool:
    """True when the sandbox extension answers ``GET /api/sandbox/status`` at ``url``."""
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        response = httpx.get(url.rstrip("/") + f"/{API}/status", headers=headers, timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and "backend" in _json_or_empty(response)


def _json_or_empty(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def launching_server(
    runtime_dirs: list[str] | None = None, parent_pid: int | None = None
) -> dict[str, Any] | None:
    """The runtime info of the Jupyter server that launched this kernel, if any.

    A kernel's parent process is the server that started it (jupyter_client also
    sets ``JPY_PARENT_PID``); the server's ``jpserver-<pid>.json`` runtime file
    holds its URL and token.
    """
    from jupyter_core.paths import jupyter_runtime_dir
    from jupyter_server.serverapp import list_running_servers

    pids = {parent_pid} if parent_pid else _parent_pids()
    dirs = runtime_dirs if runtime_dirs is not None else _runtime_dirs(jupyter_runtime_dir())
    for folder in dirs:
        for info in list_running_servers(folder):
            if info.get("pid") in pids:
                return dict(info)
    return None


def _parent_pids() -> set[int]:
    pids = {os.getppid()}
    raw = os.environ.get("JPY_PARENT_PID", "")
    if raw.isdigit():
        pids.add(int(raw))
    return pids


def _runtime_dirs(default: str) -> list[str]:
    dirs = [default]
    try:
        from ipykernel.connect import get_connection_file

        dirs.append(str(Path(get_connection_file()).parent))
    except Exception:  # not in a kernel: only the default runtime dir
        pass
    return list(dict.fromkeys(dirs))


def make_client(server: str, token: str = "") -> SandboxClient:
    """The client for the ``server`` setting: ``local``, ``auto`` or a URL."""
    choice = server.strip()
    if choice == "local":
        return LocalClient()
    if choice == "auto":
        info = launching_server()
        if info is not None:
            url, found_token = str(info.get("url", "")), str(info.get("token", ""))
            if url and server_answers(url, found_token):
                return RestClient(url, found_token)
        return LocalClient()
    if choice.startswith(("http://", "https://")):
        return RestClient(choice, token or os.environ.get("JUPYTER_TOKEN", ""))
    raise SandboxError(
        f"server must be 'auto', 'local' or an http(s) URL, got {server!r}", code="invalid_setting"
    )
