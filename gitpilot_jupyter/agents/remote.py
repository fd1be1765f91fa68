"""The sandbox of a running Jupyter server, over its REST API.

Plans made here land in the server's one PlanStore, where JupyterLab, a
notebook or ``jupyter sandbox approve`` can approve them. The server is found
from ``GITPILOT_JUPYTER_URL`` / ``GITPILOT_JUPYTER_TOKEN``, else from the
runtime files of the servers running for this user (``jpserver-*.json``), keeping
the first one that serves ``/api/sandbox/status``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..sandbox.claims import ClaimAnswer
from ..sandbox.errors import SandboxError, ServerUnreachable
from ..sandbox.results import RunResult
from .access import PlanTicket

URL_ENV = "GITPILOT_JUPYTER_URL"
TOKEN_ENV = "GITPILOT_JUPYTER_TOKEN"
#: Seconds to wait for a server to answer a probe or a plan/approve/status call.
REQUEST_TIMEOUT = 10.0
#: A run may last the longest snippet timeout plus the time to start and report.
RUN_TIMEOUT = 660.0


@dataclass(frozen=True)
class ServerInfo:
    """A Jupyter server: its base URL (ending in ``/``), token, and where it was found."""

    url: str
    token: str
    found_in: str


def _base(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def runtime_servers(runtime_dir: str | None = None) -> list[ServerInfo]:
    """Servers whose runtime file names a live process, newest first (files are only read)."""
    if runtime_dir is None:
        from jupyter_core.paths import jupyter_runtime_dir

        runtime_dir = jupyter_runtime_dir()
    folder = Path(runtime_dir)
    if not folder.is_dir():
        return []
    found = []
    files = sorted(folder.glob("jpserver-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in files:
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # being written, or not ours to read
        if isinstance(info, dict) and info.get("url") and _alive(info.get("pid")):
            found.append(ServerInfo(_base(str(info["url"])), str(info.get("token", "")), str(path)))
    return found


async def _serves_sandbox(server: ServerInfo) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2.0) as client:
            answer = await client.get(
                server.url + "api/sandbox/status", headers=_auth(server.token)
            )
    except httpx.HTTPError:
        return False
    return answer.status_code == 200


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"} if token else {}


async def discover_server(
    environ: Mapping[str, str], runtime_dir: str | None = None
) -> ServerInfo | None:
    """The server from the env vars, else the first running one with the sandbox extension."""
    url = environ.get(URL_ENV, "").strip()
    if url:
        return ServerInfo(_base(url), environ.get(TOKEN_ENV, ""), URL_ENV)
    for server in runtime_servers(runtime_dir):
        if await _serves_sandbox(server):
            return server
    return None


class RemoteAccess:
    """The sandbox REST API of one Jupyter server (a fresh HTTP client per call)."""

    in_process = False

    def __init__(self, server: ServerInfo) -> None:
        self.server = ServerInfo(_base(server.url), server.token, server.found_in)
        self.where = self.server.url

    async def _call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        timeout: float = REQUEST_TIMEOUT,
    ) -> Any:
        url = self.server.url + "api/sandbox/" + path
        try:
            async with httpx.AsyncClient(timeout=timeout) as client:
                answer = await client.request(
                    method, url, json=body, headers=_auth(self.server.token)
                )
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ServerUnreachable(
                f"the Jupyter server at {self.server.url} does not answer "
                f"({exc.__class__.__name__})"
            ) from None
        try:
            data = answer.json()
        except ValueError:
            data = None
        if answer.status_code >= 400:
            error = SandboxError(_message(answer, data), code=_code(answer, data))
            error.status = answer.status_code
            raise error
        return data

    async def plan(
        self, *, language: str, code: str, timeout_sec: int | None, auto_approve: bool
    ) -> PlanTicket:
        """``POST /api/sandbox/agent/plan``."""
        body: dict[str, Any] = {"language": language, "code": code, "approve": auto_approve}
        if timeout_sec is not None:
            body["timeout_sec"] = timeout_sec
        data = await self._call("POST", "agent/plan", body)
        return PlanTicket(data["plan"], data.get("claim"), data.get("approval_token"))

    async def claim(self, plan_id: str, secret: str) -> ClaimAnswer:
        """``POST /api/sandbox/agent/claim``."""
        data = await self._call("POST", "agent/claim", {"plan_id": plan_id, "claim": secret})
        return ClaimAnswer(data["state"], data.get("approval_token"), data.get("expires_in"))

    async def run(self, plan: dict[str, Any], approval_token: str | None) -> RunResult:
        """``POST /api/sandbox/run``: the endpoint the human's Run button uses."""
        body = {
            "language": plan["language"],
            "code": plan["code"],
            "timeout_sec": plan["timeout_sec"],
            "approval_token": approval_token,
            "backend": plan["backend"],
            "allow_network": plan["network"],
        }
        return RunResult.from_dict(await self._call("POST", "run", body, timeout=RUN_TIMEOUT))

    async def approve(self, plan_id: str) -> dict[str, Any]:
        """``POST /api/sandbox/approve``."""
        data: dict[str, Any] = await self._call("POST", "approve", {"plan_id": plan_id})
        return data

    async def reject(self, plan_id: str) -> None:
        """``POST /api/sandbox/reject``."""
        await self._call("POST", "reject", {"plan_id": plan_id})

    async def pending(self) -> list[dict[str, Any]]:
        """``GET /api/sandbox/plans``."""
        data = await self._call("GET", "plans")
        plans: list[dict[str, Any]] = data["plans"]
        return plans

    async def status(self) -> dict[str, Any]:
        """``GET /api/sandbox/status``."""
        data: dict[str, Any] = await self._call("GET", "status")
        return data


def _message(answer: httpx.Response, data: Any) -> str:
    if isinstance(data, dict) and isinstance(data.get("message"), str):
        return str(data["message"])
    return f"the Jupyter server answered HTTP {answer.status_code}"


def _code(answer: httpx.Response, data: Any) -> str:
    if isinstance(data, dict) and isinstance(data.get("code"), str):
        return str(data["code"])
    return "not_found" if answer.status_code == 404 else "server_error"
