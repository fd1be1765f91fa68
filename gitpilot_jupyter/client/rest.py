"""The REST client: the sandbox API of a Jupyter server (approvals and audit live there).

Plans made here land in the server's one plan store, where JupyterLab, a notebook
(``%sandbox plans``) or ``jupyter sandbox approve`` can approve them. Runs and
lifecycle actions ask for NDJSON so output and pull progress arrive as they
happen; a server that answers plain JSON works too.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import httpx

from ..sandbox import rich
from ..sandbox.backend import OutputCallback
from ..sandbox.batch import BatchItem, BatchPlan, BatchProgress, ClusterAccess, ResultLog
from ..sandbox.batch.runner import BatchWatch, cancelled_report
from ..sandbox.claims import AgentPlan, ClaimAnswer
from ..sandbox.errors import InvalidRequest, SandboxError
from ..sandbox.matrixlab.ops import check_lifecycle_action
from ..sandbox.outfiles import check_out_name
from ..sandbox.plans import ExecutionPlan, PlannedRun
from ..sandbox.records import Status
from ..sandbox.request import NO_OPTIONS, RunOptions
from ..sandbox.results import RunResult
from ..sandbox.settings import MAX_TIMEOUT_SEC
from .base import ProgressCallback, SandboxClient
from .server import (
    API,
    INSTALL_READ_TIMEOUT_SEC,
    REQUEST_TIMEOUT_SEC,
    ServerInfo,
    auth_headers,
    call_api,
    error_from_answer,
    fetch_bytes,
    http_client,
    unreachable,
)

NDJSON = "application/x-ndjson"
#: The run options a batch request carries (``BatchPlanRequest``).
_BATCH_OPTIONS = ("timeout_sec", "backend", "allow_network", "env")


class RestClient(SandboxClient):
    """The sandbox REST API of a Jupyter server (approvals and audit live there)."""

    def __init__(
        self,
        base_url: str,
        token: str = "",
        *,
        session_id: str | None = None,
        timeout: float = REQUEST_TIMEOUT_SEC,
    ) -> None:
        super().__init__(session_id)
        self.server = ServerInfo(base_url, token, "argument")
        self.base_url = self.server.url
        self.where = self.server.url
        self.token = token
        self.timeout = timeout
        self.path = "REST"

    def _timeout(self, read_timeout: float | None = None) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=read_timeout or self.timeout)

    async def _call(self, method: str, route: str, body: Any = None) -> Any:
        return await call_api(self.server, method, route, body, timeout=self.timeout)

    def _plan_body(self, options: RunOptions, **more: Any) -> dict[str, Any]:
        """What a plan request carries: the options given, this session, ``more`` set."""
        body = {**options.to_body(), "session_id": self.session_id}
        body.update({k: v for k, v in more.items() if v is not None})
        return body

    async def plan(self, options: RunOptions) -> ExecutionPlan:
        answer = await self._call("POST", "plan", self._plan_body(options))
        return ExecutionPlan.from_dict(answer["plan"])

    async def plan_and_run(
        self,
        options: RunOptions,
        *,
        confirmed: bool = False,
        on_output: OutputCallback | None = None,
        run_id: str | None = None,
    ) -> PlannedRun:
        body = self._plan_body(options, confirm=confirmed or None, run_id=run_id)
        answer, streamed = await self._stream_output("plan-and-run", body, on_output)
        planned = PlannedRun.from_dict(answer)
        if planned.result is not None and not streamed:
            await _replay(planned.result, on_output)
        return planned

    async def approve(
        self, plan_id: str, *, approved_by: str = "user", for_planner: bool = False
    ) -> dict[str, Any]:
        # For a planner's plan no session_id: the planner runs it from its own session.
        body = (
            {"plan_id": plan_id}
            if for_planner
            else {"plan_id": plan_id, "session_id": self.session_id}
        )
        return dict(await self._call("POST", "approve", body))

    async def run(
        self, token: str, *, on_output: OutputCallback | None = None, run_id: str | None = None
    ) -> RunResult:
        body = {"approval_token": token, "session_id": self.session_id}
        if run_id is not None:
            body["run_id"] = run_id
        answer, streamed = await self._stream_output("run", body, on_output)
        result = RunResult.from_dict(answer)
        if not streamed:  # a server that answered the whole envelope at once
            await _replay(result, on_output)
        return result

    async def _stream_output(
        self, route: str, body: dict[str, Any], on_output: OutputCallback | None
    ) -> tuple[dict[str, Any], bool]:
        """POST a run, its output lines to ``on_output``: the result line, and whether
        any output came as lines (a server answering plain JSON sends none)."""
        streamed = False

        async def line(event: dict[str, Any]) -> None:
            nonlocal streamed
            kind = event.get("type")
            if kind in ("stdout", "stderr"):
                streamed = True
                if on_output is not None:
                    await on_output(kind, str(event.get("data", "")))
            elif kind == rich.DISPLAY_STREAM and isinstance(event.get("data"), dict):
                # The line carries the output as an object; on_output takes its JSON text.
                streamed = True
                if on_output is not None:
                    await on_output(rich.DISPLAY_STREAM, json.dumps(event["data"]))

        # The longest snippet may print nothing until it ends.
        answer = await self._stream(route, body, line, read_timeout=MAX_TIMEOUT_SEC + self.timeout)
        return answer, streamed

    async def _stream(
        self,
        route: str,
        body: dict[str, Any],
        on_line: Callable[[dict[str, Any]], Awaitable[None]],
        *,
        read_timeout: float | None = None,
    ) -> dict[str, Any]:
        """POST asking for NDJSON: hand each line to ``on_line``; return the ``result`` line.

        A server that answers plain JSON instead gives its body as the result.
        """
        headers = {"Accept": NDJSON}
        try:
            async with (
                http_client() as client,
                client.stream(
                    "POST",
                    f"{self.base_url}{API}/{route}",
                    json=body,
                    headers={**auth_headers(self.token), **headers},
                    timeout=self._timeout(read_timeout),
                ) as response,
            ):
                if response.status_code >= 400:
                    await response.aread()
                    raise error_from_answer(response)
                if NDJSON not in response.headers.get("content-type", ""):
                    return dict(json.loads(await response.aread()))
                result: dict[str, Any] | None = None
                async for raw in response.aiter_lines():
                    if not raw.strip() or result is not None:
                        # Read to the stream's end (it ends right after its result), so
                        # the connection is kept for the next call, not dropped.
                        continue
                    event = json.loads(raw)
                    kind = event.pop("type", None)
                    if kind == "result":
                        result = dict(event)
                        continue
                    if kind == "error":
                        raise SandboxError(
                            str(event.get("message", "the request failed")),
                            code=str(event.get("code", "server_error")),
                        )
                    await on_line({"type": kind, **event})
                if result is not None:
                    return result
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise unreachable(self.base_url, exc) from None
        raise SandboxError("the server's stream ended without a result", code="server_error")

    async def plan_batch(
        self,
        items: Sequence[BatchItem],
        options: RunOptions = NO_OPTIONS,
        *,
        deadline_sec: int | None = None,
    ) -> BatchPlan:
        # The batch's options apply to every item; each item carries its own snippet.
        shared = {k: v for k, v in options.to_body().items() if k in _BATCH_OPTIONS}
        body = {**shared, "items": [item.to_dict() for item in items]}
        body["session_id"] = self.session_id
        if deadline_sec is not None:
            body["deadline_sec"] = deadline_sec
        answer = await self._call("POST", "batch/plan", body)
        return BatchPlan.from_dict(answer["batch"])

    async def approve_batch(self, batch_id: str) -> dict[str, Any]:
        body = {"batch_id": batch_id, "session_id": self.session_id}
        return dict(await self._call("POST", "batch/approve", body))

    async def run_batch(
        self,
        batch: BatchPlan,
        token: str | None,
        *,
        watch: BatchWatch,
        out: str | Path | None = None,
        workers: int | None = None,
        cluster: str | ClusterAccess | None = None,
    ) -> dict[str, Any]:
        if cluster is not None:
            raise InvalidRequest(
                "a server runs batches where its administrator says (SandboxApp.batch_cluster); "
                "--cluster is for the in-process path"
            )
        log = ResultLog(out) if out is not None else None
        # Items whose results ``out`` holds already are skipped, as in-process: the server
        # runs the approved batch without them (the results file is on this side).
        done = log.open({i: p.digest for i, p in batch.items.items()}) if log else {}
        skipped = len(done)
        progress: BatchProgress | None = None

        async def line(event: dict[str, Any]) -> None:
            nonlocal progress
            kind = event.pop("type", None)
            if kind == "item":
                watch.records.append(event)
                if log is not None:
                    log.append(event)
            elif kind == "progress":
                progress = _with_skipped(BatchProgress.from_dict(event), skipped)
                watch.progress(progress)

        body: dict[str, Any] = {"batch_id": batch.batch_id, "approval_token": token}
        body.update(session_id=self.session_id, workers=workers, skip=list(done) or None)
        body = {k: v for k, v in body.items() if v is not None or k == "approval_token"}
        try:
            report = await self._stream("batch", body, line, read_timeout=None)
        except (asyncio.CancelledError, KeyboardInterrupt):
            # Closing the stream stops the batch on the server; report what came back.
            watch.report = cancelled_report(
                batch, watch.records, progress, executor=self.path, out=out
            )
            raise
        finally:
            if log is not None:
                log.close()
        report.update(total=batch.count, skipped=report["skipped"] + skipped)
        report["remaining"] = batch.count - report["skipped"] - report.get("finished", 0)
        report["out"] = str(log.path) if log is not None else None
        watch.report = report
        return report

    async def pending(self) -> list[ExecutionPlan]:
        answer = await self._call("GET", "plans")
        return [ExecutionPlan.from_dict(plan) for plan in answer["plans"]]

    async def sessions(self) -> list[dict[str, Any]]:
        return list((await self._call("GET", "sessions"))["sessions"])

    async def start_session(
        self, name: str, *, allow_network: bool | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"name": name}
        if allow_network is not None:
            body["allow_network"] = allow_network
        return dict(await self._call("POST", "sessions", body))

    async def stop_session(self, name: str) -> None:
        await self._call("DELETE", f"sessions/{_path_part(name)}")

    async def restart_session(self, name: str) -> dict[str, Any]:
        return dict(await self._call("POST", f"sessions/{_path_part(name)}/restart", {}))

    async def interrupt_session(self, name: str) -> None:
        await self._call("POST", f"sessions/{_path_part(name)}/interrupt", {})

    async def cancel(self, run_id: str) -> None:
        # (Closing a run's stream stops it as well; this says so while the stream stays open.)
        await self._call("DELETE", f"runs/{run_id}")

    async def run_file(self, run_id: str, name: str) -> bytes:
        route = f"runs/{quote(run_id, safe='')}/files/{quote(check_out_name(name), safe='/')}"
        return await fetch_bytes(self.server, route, timeout=self.timeout)

    async def reject(self, plan_id: str) -> None:
        await self._call("POST", "reject", {"plan_id": plan_id})

    async def plan_for_agent(self, options: RunOptions, *, auto_approve: bool) -> AgentPlan:
        body = {**options.to_body(), "approve": auto_approve, "session_id": self.session_id}
        body.pop("source", None)  # the agent route sets it
        data = await self._call("POST", "agent/plan", body)
        plan = ExecutionPlan.from_dict(data["plan"])
        return AgentPlan(plan, data.get("claim"), data.get("approval_token"))

    async def claim(self, plan_id: str, secret: str) -> ClaimAnswer:
        data = await self._call("POST", "agent/claim", {"plan_id": plan_id, "claim": secret})
        return ClaimAnswer(data["state"], data.get("approval_token"), data.get("expires_in"))

    async def status(self) -> Status:
        return cast(Status, await self._call("GET", "status"))

    async def config(self) -> dict[str, Any]:
        return dict(await self._call("GET", "config"))

    async def settings_file(self) -> str:
        return str((await self.status())["settings_path"])

    async def configure(self, changes: Mapping[str, object], *, confirm: bool = False) -> Status:
        body = {**changes, "confirm": True} if confirm else dict(changes)
        return cast(Status, await self._call("PUT", "config", body))

    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        body = {k: v for k, v in {"matrixlab_url": url, "matrixlab_token": token}.items() if v}
        return dict(await self._call("POST", "matrixlab/test", body))

    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        if check_lifecycle_action(action) == "status":
            return dict(await self._call("GET", "matrixlab/lifecycle"))

        async def line(event: dict[str, Any]) -> None:
            if event.pop("type", None) == "progress" and progress is not None:
                await progress(event)

        return await self._stream(
            f"matrixlab/{action}", {}, line, read_timeout=INSTALL_READ_TIMEOUT_SEC
        )


def _with_skipped(progress: BatchProgress, skipped: int) -> BatchProgress:
    """The progress of the whole batch: the server's counts and the items skipped here."""
    progress.total += skipped
    progress.skipped += skipped
    return progress


async def _replay(result: RunResult, on_output: OutputCallback | None) -> None:
    """Give a whole envelope to ``on_output`` as its stream would have: stdout cut where
    each display output came (``stdout_at``), then stderr."""
    if on_output is None:
        return
    shown = 0
    for item in result.outputs:
        cut = min(max(shown, int(item.get("stdout_at") or 0)), len(result.stdout))
        if cut > shown:
            await on_output("stdout", result.stdout[shown:cut])
        shown = cut
        await on_output(rich.DISPLAY_STREAM, json.dumps(item))
    if result.stdout[shown:]:
        await on_output("stdout", result.stdout[shown:])
    if result.stderr:
        await on_output("stderr", result.stderr)


def _path_part(name: str) -> str:
    """A session's name as one path segment (a bad name reaches the server as it is, to be
    refused there, never as another route)."""
    return urllib.parse.quote(name, safe="")
