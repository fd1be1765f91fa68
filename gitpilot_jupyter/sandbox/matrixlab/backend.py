"""The ``matrixlab`` backend: a MatrixLab Runner runs each snippet in its own container.

Snippets go to ``POST /code/run``, workspace commands (a file with its folder)
to ``POST /run`` with a zip workspace, never to ``/repo/run``. The Runner's
answers are made equal to the local backends' results: the banner line is
stripped, exit 124 + ``TIMEOUT`` becomes ``timed_out`` with exit -1, and our
output cap applies after the Runner's. See ``docs/dev/matrixlab-runner.md``.
"""

from __future__ import annotations

import asyncio
import base64
import shlex
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx

from ...tls import tls_context
from ..backend import OutputCallback, RunRequest, SandboxBackend
from ..errors import BackendFailure, InvalidRequest
from ..languages import Interpreters, canonical_language
from ..output import DEFAULT_OUTPUT_CAP, cap_text
from ..results import RunResult, new_run_id
from .protocol import (
    BANNER,
    IMAGE_ALIASES,
    TIMEOUT_MARK,
    TIMEOUT_WORDS,
    auth_headers,
    body_excerpt,
    image_language,
    runner_error,
    unreachable,
)
from .workspace import zip_workspace

#: Extra seconds the HTTP call waits beyond the run timeout (container start, transfer).
HTTP_GRACE_SEC = 5.0
HEALTH_TIMEOUT_SEC = 5.0


class MatrixLabSandbox(SandboxBackend):
    """Runs snippets through a MatrixLab Runner over HTTP (``httpx.AsyncClient``)."""

    name: ClassVar[str] = "matrixlab"

    def __init__(
        self,
        *,
        url: str,
        token: str = "",
        image: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.image = image
        self._transport = transport

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=self._transport, headers=auth_headers(self.token), verify=tls_context()
        )

    def image_for(self, language: str) -> str | None:
        """The user's image when it serves ``language``; None lets the Runner choose."""
        if self.image and image_language(self.image) == canonical_language(language):
            return self.image
        return None

    def isolation(self) -> list[str]:
        """Each run gets its own container on the Runner's Docker engine."""
        return ["runner-container"]

    # -- HTTP ---------------------------------------------------------------------------

    async def _post(
        self, path: str, body: dict[str, Any], run_timeout: int
    ) -> dict[str, Any] | None:
        """POST to the Runner; the JSON answer, or None for its 500-on-timeout answer."""
        timeout = run_timeout + HTTP_GRACE_SEC
        started = time.monotonic()
        try:
            async with self._client() as client:
                response = await client.post(
                    self.url + path,
                    json=body,
                    timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                )
        except httpx.HTTPError as exc:
            raise unreachable(self.url, exc, timeout) from None
        if (
            response.status_code == 500
            and TIMEOUT_WORDS.search(response.text)
            and time.monotonic() - started >= run_timeout
        ):
            # This Runner version fails a run that wrote to stderr before timing out; a 500
            # that mentions a timeout before the run's own could be up is a real error.
            return None
        if not response.is_success:
            raise runner_error(self.url, path, response)
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if not isinstance(payload, dict) or not isinstance(payload.get("exit_code"), int):
            raise BackendFailure(
                f"the MatrixLab Runner at {self.url} answered {path} with something that is not "
                f"a run result: {body_excerpt(response)}"
            )
        return payload

    async def health(self) -> dict[str, Any]:
        """``{"ok", "error", "remote"}`` from ``GET /health``; never raises."""
        try:
            async with self._client() as client:
                response = await client.get(self.url + "/health", timeout=HEALTH_TIMEOUT_SEC)
        except httpx.HTTPError as exc:
            return {"ok": False, "error": unreachable(self.url, exc).message, "remote": None}
        try:
            remote = response.json() if response.is_success else None
        except ValueError:
            remote = None
        if not isinstance(remote, dict):
            return {
                "ok": False,
                "error": f"{self.url}/health answered {response.status_code} without a Runner "
                f"health document: {body_excerpt(response)}",
                "remote": None,
            }
        if remote.get("ok") is False:
            error = (
                f"the MatrixLab Runner at {self.url} is reachable, "
                "but its Docker daemon is unavailable"
            )
            return {"ok": False, "error": error, "remote": remote}
        return {"ok": True, "error": None, "remote": remote}

    # -- results ------------------------------------------------------------------------

    def _envelope(
        self,
        payload: dict[str, Any] | None,
        *,
        language: str,
        command: list[str],
        cap: int,
        run_id: str,
        plan_id: str | None,
        started: float,
    ) -> RunResult:
        """The local backends' envelope from a Runner answer (None = timed out with a 500)."""
        result = RunResult(
            backend=self.name,
            language=language,
            command=command,
            exit_code=-1,
            timed_out=payload is None,
            run_id=run_id,
            plan_id=plan_id,
            isolation=self.isolation(),
        )
        result.duration_ms = int((time.monotonic() - started) * 1000)
        if payload is None:
            return result
        exit_code = payload["exit_code"]
        stdout = BANNER.sub("", str(payload.get("stdout") or ""), count=1)
        stderr = str(payload.get("stderr") or "")
        timed_out = payload.get("timed_out") is True or (
            exit_code == 124 and TIMEOUT_MARK.search(stderr) is not None
        )
        if timed_out:
            stderr = TIMEOUT_MARK.sub("", stderr)
        result.stdout, cut_out = cap_text(stdout, cap)
        result.stderr, cut_err = cap_text(stderr, cap)
        result.truncated = bool(payload.get("truncated")) or cut_out or cut_err
        result.timed_out = timed_out
        result.exit_code = -1 if timed_out else exit_code
        result.sandbox_id = str(payload["sandbox_id"]) if payload.get("sandbox_id") else None
        if isinstance(payload.get("duration_ms"), int):
            result.duration_ms = payload["duration_ms"]
        return result

    @staticmethod
    async def _deliver(result: RunResult, on_output: OutputCallback | None) -> None:
        # The Runner answers once at the end: hand the output over in one piece per stream.
        if on_output is None:
            return
        if result.stdout:
            await on_output("stdout", result.stdout)
        if result.stderr:
            await on_output("stderr", result.stderr)

    # -- runs ---------------------------------------------------------------------------

    def _limits(self, request: RunRequest) -> dict[str, Any]:
        return {
            "mem_limit_mb": min(max(request.limits.memory_mb, 128), 32768),
            "pids_limit": min(max(request.limits.max_processes, 16), 4096),
        }

    async def run(self, request: RunRequest, on_output: OutputCallback | None = None) -> RunResult:
        """Run one snippet with ``POST /code/run``."""
        language = canonical_language(request.language)
        body: dict[str, Any] = {
            "language": language,
            "code": request.code,
            "timeout": request.timeout_sec,
            "allow_network": request.allow_network,
            "metadata": {"client": "gitpilot-jupyter", "run_id": request.run_id},
            **self._limits(request),
        }
        if request.stdin is not None:
            body["stdin"] = request.stdin
        image = self.image_for(language)
        if image:
            body["image"] = image
        started = time.monotonic()
        payload = await self._post("/code/run", body, request.timeout_sec)
        result = self._envelope(
            payload,
            language=language,
            command=Interpreters().display_command(language),
            cap=request.max_output_bytes,
            run_id=request.run_id,
            plan_id=request.plan_id,
            started=started,
        )
        await self._deliver(result, on_output)
        return result

    async def run_workspace(
        self,
        argv: Sequence[str],
        folder: str | Path,
        *,
        language: str,
        timeout_sec: int,
        cwd: str = ".",
        allow_network: bool = False,
        max_output_bytes: int = DEFAULT_OUTPUT_CAP,
        run_id: str | None = None,
        plan_id: str | None = None,
        on_output: OutputCallback | None = None,
    ) -> RunResult:
        """Run ``argv`` in ``folder`` (zipped and sent along) with ``POST /run``.

        For "a file with its folder": ``argv`` is e.g. ``["python", "main.py"]``
        and ``cwd`` is relative to ``folder``. Skipped content: see :mod:`..workspace`.
        """
        language = canonical_language(language)
        if cwd.startswith("/") or ".." in cwd.replace("\\", "/").split("/"):
            raise InvalidRequest(f"cwd must be relative to the workspace, without '..': {cwd!r}")
        archive = await asyncio.to_thread(zip_workspace, folder)
        run_id = run_id or new_run_id()
        body: dict[str, Any] = {
            "cmd": shlex.join(argv),
            "cwd": cwd,
            "workspace": {"type": "zip", "zip_base64": base64.b64encode(archive).decode("ascii")},
            "timeout": timeout_sec,
            "image": self.image_for(language) or IMAGE_ALIASES[language],
            "allow_network": allow_network,
            "metadata": {"client": "gitpilot-jupyter", "run_id": run_id},
        }
        started = time.monotonic()
        payload = await self._post("/run", body, timeout_sec)
        result = self._envelope(
            payload,
            language=language,
            command=list(argv),
            cap=max_output_bytes,
            run_id=run_id,
            plan_id=plan_id,
            started=started,
        )
        await self._deliver(result, on_output)
        return result
