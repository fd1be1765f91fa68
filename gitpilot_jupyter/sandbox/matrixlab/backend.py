"""The ``matrixlab`` backend: a MatrixLab Runner runs each snippet in its own container.

Snippets go to ``POST /code/run`` as a bash script that writes the snippet's file
(``main.py``, ``main.js``, ``main.sh``) and runs it under our wrapper; file runs
(and input beyond ``/code/run``'s limits) go to ``POST /run`` with a zip workspace,
never ``/repo/run``. The wrapper (:mod:`.wrapper`) enforces the snippet's own
timeout inside the container and reports its exit status, so the answer is the
local backends' envelope: the banner line is stripped, a timeout is ``timed_out``
with exit -1 and the output kept, a snippet exiting 124 or writing ``TIMEOUT`` is
not timed out, the Runner's own failures (exit 999, Docker's 125, its 500s) are
502 ``backend_error`` naming its message, and our output cap applies after the
Runner's. Limits the Runner cannot honour are said in ``notes``. Runs wait for one
of the Runner's slots (:mod:`.load`); a stop removes the run's container
(:mod:`.stopping`) or says why it could not. See ``docs/admin/matrixlab.md`` for
what still differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import httpx

from ...tls import tls_context
from ..backend import OutputCallback, ResourceLimits, RunRequest, SandboxBackend
from ..errors import BackendFailure, ContainmentUnavailable, SandboxError
from ..languages import canonical_language
from ..output import cap_text
from ..policy import BASE_VARS
from ..results import MEMORY_EXCEEDED, RunResult
from .config import RUNNER_MAX_WORKSPACE_MB, kept_copies, network_refusal
from .docker_steps import error_text
from .jobs import forget_run
from .load import RunnerSlots, max_runs
from .protocol import (
    BANNER,
    DOCKER_RUN_FAILED_EXIT,
    IMAGE_ALIASES,
    INTERPRETERS,
    MAX_MEMORY_MB,
    MAX_PIDS,
    MAX_RUNNER_TIMEOUT_SEC,
    MIN_MEMORY_MB,
    MIN_PIDS,
    RUNNER_ERROR_EXIT,
    RUNNER_TIMEOUT_EXIT,
    SNIPPET_FILES,
    TIMEOUT_500,
    TIMEOUT_MARK,
    WORKSPACE_DIR,
    auth_headers,
    body_excerpt,
    busy,
    health_document,
    image_language,
    not_a_runner,
    runner_command,
    runner_error,
    runner_failure,
    token_answer,
    transport_failure,
    unreachable,
)
from .stopping import RUN_TAG_ENV, new_run_tag, remove_tagged, stop_unavailable
from .workspace import request_content, zip_workspace
from .wrapper import (
    START_ALLOWANCE_SEC,
    STDIN_FILE,
    TIMEOUT_EXITS,
    new_marker,
    read_report,
    snippet_script,
    wrapped_command,
)

#: Extra seconds the HTTP call waits beyond the Runner's budget (transfer, a busy Runner).
HTTP_GRACE_SEC = 5.0
HEALTH_TIMEOUT_SEC = 5.0
#: The most characters ``POST /code/run`` takes in ``code`` and in ``stdin``.
MAX_CODE_RUN_CHARS = 1_000_000
#: Seconds a stop looks for the run's container (it may still be starting), and polls.
STOP_FIND_SEC = 2.0
STOP_POLL_SEC = 0.2
#: Seconds the Runner then has to answer with the output so far (the service's own
#: grace, 5 s, must not run out first).
STOP_ANSWER_SEC = 2.0
#: Status codes of a Runner (or a proxy before it) with no room for the run: busy, not down.
BUSY_STATUSES = (429, 503)
#: Processes of ours in the container besides the snippet: docker-init, the step's bash, our
#: script's bash (on /code/run), timeout.
WRAPPER_PROCESSES = 4


def limit_notes(
    limits: ResourceLimits, stop_reason: str | None = None, kept: str | None = None
) -> list[str]:
    """What the Runner enforces differently from ``limits``, one sentence each; with
    ``stop_reason``, why Stop cannot stop a run there; with ``kept``, what the Runner
    keeps of each run (:func:`~.config.kept_copies`)."""
    notes = []
    if limits.memory_mb < MIN_MEMORY_MB:
        notes.append(
            f"memory limit {MIN_MEMORY_MB} MB, not {limits.memory_mb} MB: the Runner's minimum"
        )
    if limits.max_processes < MIN_PIDS:
        notes.append(f"process limit {MIN_PIDS}, not {limits.max_processes}: the Runner's minimum")
    notes.append(
        f"no file-size limit ({limits.max_file_size_mb} MB asked): the Runner has none "
        "(its /tmp is a 256 MB tmpfs)"
    )
    if stop_reason is not None:
        notes.append(f"Stop cannot stop a run on this Runner: {stop_reason}")
    if kept is not None:
        notes.append(kept)
    return notes


def passed_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a run sends the Runner: those passed by name (by the caller or the
    administrator), never the base ones (``PATH``, locale...) that describe this host."""
    return {name: value for name, value in env.items() if name not in BASE_VARS}


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
        environ: Mapping[str, str] | None = None,
        network_isolated: bool = False,
        max_workspace_mb: int = RUNNER_MAX_WORKSPACE_MB,
        jobs_dir: str | None = None,
        runner_container: str | None = None,
        managed: bool = False,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.image = image
        self._transport = transport
        #: The server's environment: the lifecycle flag and the runs-at-once setting.
        self.environ = os.environ if environ is None else environ
        self.network_isolated = network_isolated
        self.max_workspace_mb = max_workspace_mb
        #: The Runner's jobs folder on this host, where the lifecycle owns it: pruned after runs.
        self.jobs_dir = jobs_dir
        #: The lifecycle's Runner container, where it manages one: removes the Runner's
        #: root-owned copies this server may not.
        self.runner_container = runner_container
        #: The lifecycle manages this Runner (:meth:`.config.LifecycleConfig.manages`): the
        #: copies it keeps of each run are removed here.
        self.managed = managed

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            transport=self._transport, headers=auth_headers(self.token), verify=tls_context()
        )

    def image_for(self, language: str) -> str:
        """The user's image when it serves ``language``, else the Runner's alias for it."""
        language = canonical_language(language)
        if self.image and image_language(self.image) == language:
            return self.image
        return IMAGE_ALIASES[language]

    def isolation(self) -> list[str]:
        """Each run gets its own container on the Runner's Docker engine."""
        return ["runner-container"]

    def display_command(self, language: str, file: str | None = None) -> list[str]:
        """The command plans and results show: what the container's tracebacks name."""
        language = canonical_language(language)
        if file is None:
            return runner_command(language)
        return [INTERPRETERS[language], f"{WORKSPACE_DIR}/{Path(file).name}"]

    def limit_notes(self, limits: ResourceLimits) -> list[str]:
        """Limits the Runner cannot honour as asked, and whether Stop can stop a run
        there (plans show them, results carry them)."""
        return limit_notes(limits, stop_unavailable(self.url, self.environ), self.kept())

    def kept(self) -> str | None:
        """What the Runner keeps of each run that this server cannot remove (None: nothing)."""
        return kept_copies(self.managed)

    def refusal(self, *, allow_network: bool = False) -> ContainmentUnavailable | None:
        """Network on is refused unless the administrator says the Runner isolates it."""
        return network_refusal(
            self.url, isolated=self.network_isolated, allow_network=allow_network
        )

    # -- HTTP ---------------------------------------------------------------------------

    async def _post_run(
        self, path: str, body: dict[str, Any], budget: int
    ) -> tuple[dict[str, Any], float]:
        """POST a run to ``path``: the run result and the seconds it took by our clock.

        Raises :class:`_RunnerTimeout` for this Runner version's 500 after its budget.
        """
        timeout = budget + HTTP_GRACE_SEC
        started = time.monotonic()
        try:
            async with self._client() as client:
                response = await client.post(
                    self.url + path,
                    **request_content(body),
                    timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                )
        except httpx.HTTPError as exc:
            raise transport_failure(self.url, exc, timeout) from None
        elapsed = time.monotonic() - started
        if (
            response.status_code == 500
            and elapsed >= budget
            and TIMEOUT_500.search(response.text) is not None
        ):
            # Runner 0.1.0 fails a run that wrote to stderr before its timeout this way
            # ("can't concat str to bytes"). By our clock the budget is spent: it timed out.
            raise _RunnerTimeout
        if response.status_code in BUSY_STATUSES:
            raise busy(self.url, response)
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
        return payload, elapsed

    async def health(self) -> dict[str, Any]:
        """``{"ok", "error", "remote", "token", "run"}``: ``/health``, the token, then a
        one-line snippet on the configured image (:func:`.probe.snippet_problem`); never raises.

        ``/health`` needs no token, so a Runner that refuses ours would look fine there:
        the token is checked on a protected route that runs nothing. ``run`` is False
        when the Runner is up and takes the token but the snippet failed.
        """
        try:
            async with self._client() as client:
                response = await client.get(self.url + "/health", timeout=HEALTH_TIMEOUT_SEC)
                remote = health_document(response)
                token = None
                if remote is not None and remote.get("ok") is not False:
                    token = await token_answer(client, self.url, self.token)
        except httpx.HTTPError as exc:
            return {"ok": False, "error": unreachable(self.url, exc).message, "remote": None}
        if remote is None:
            return {"ok": False, "error": not_a_runner(self.url, response), "remote": None}
        if remote.get("ok") is False:
            error = (
                f"the MatrixLab Runner at {self.url} is reachable, "
                "but its Docker daemon is unavailable"
            )
            return {"ok": False, "error": error, "remote": remote}
        assert token is not None
        if token.status_code == 401:
            state = "rejected" if self.token else "required"
            error = (
                f"the MatrixLab Runner at {self.url} is healthy but {state} the token "
                f"(401): set matrixlab_token to its MATRIXLAB_BEARER_TOKEN"
                if self.token
                else f"the MatrixLab Runner at {self.url} requires a bearer token (401): "
                "set matrixlab_token to its MATRIXLAB_BEARER_TOKEN"
            )
            return {"ok": False, "error": error, "remote": remote, "token": state}
        if token.status_code != 422:
            from .probe import token_check_failure

            error, hint = token_check_failure(token)
            return {"ok": False, "error": f"{error}; {hint}", "remote": remote, "token": None}
        state = "accepted" if self.token else "not required"
        # Healthy and the token taken, yet every run may fail: run one (kept briefly).
        from .probe import snippet_problem

        problem = await snippet_problem(self)
        if problem is not None:
            error = f"{problem[0]}; {problem[1]}"
            return {"ok": False, "error": error, "remote": remote, "token": state, "run": False}
        return {"ok": True, "error": None, "remote": remote, "token": state, "run": True}

    # -- runs ---------------------------------------------------------------------------

    async def _execute(
        self,
        path: str,
        body: dict[str, Any],
        *,
        marker: str,
        language: str,
        command: list[str],
        request: RunRequest,
        on_output: OutputCallback | None,
    ) -> RunResult:
        """Send one run (``body`` has what is particular to ``path``) and make its envelope.

        The run waits for one of the Runner's slots first (:mod:`.load`); a stop, then or
        later, ends it as :meth:`_stopped` says.
        """
        limits, timeout_sec = request.limits, request.timeout_sec
        budget = min(timeout_sec + START_ALLOWANCE_SEC, MAX_RUNNER_TIMEOUT_SEC)
        tag = new_run_tag()
        body.update(
            timeout=budget,
            image=self.image_for(language),
            allow_network=request.allow_network,
            env={**passed_env(request.env), RUN_TAG_ENV: tag},
            metadata={"client": "gitpilot-jupyter", "run_id": request.run_id},
            mem_limit_mb=min(max(limits.memory_mb, MIN_MEMORY_MB), MAX_MEMORY_MB),
            pids_limit=min(max(limits.max_processes, MIN_PIDS), MAX_PIDS) + WRAPPER_PROCESSES,
        )
        result = RunResult(
            backend=self.name,
            language=language,
            command=command,
            exit_code=-1,
            run_id=request.run_id,
            plan_id=request.plan_id,
            isolation=self.isolation(),
            notes=self.limit_notes(limits),
        )
        slots = RunnerSlots.for_runner(self.url, max_runs(self.environ))
        queued = time.monotonic()
        if not await slots.acquire(request.stop):
            result.cancelled = True  # stopped while waiting its turn: nothing was sent
            result.duration_ms = int((time.monotonic() - queued) * 1000)
            return result
        # The slot is the Runner's until it answers, even after we stopped listening.
        since = time.time()  # the run's job folder is made after this
        post = asyncio.ensure_future(self._post_run(path, body, budget))
        post.add_done_callback(lambda done: _settle(done, slots))
        started = time.monotonic()
        stop = asyncio.ensure_future(request.stop.wait()) if request.stop is not None else None
        try:
            await asyncio.wait(
                {post} if stop is None else {post, stop}, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            # The caller gave up (an interrupted cell): the container goes too.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(
                    asyncio.shield(self._remove_container(tag, post)), STOP_FIND_SEC + 1
                )
            raise
        finally:
            if stop is not None:
                stop.cancel()
        if not post.done():
            return await self._stopped(result, post, tag, marker, budget, request, started)
        ran = True  # the Runner ran it (answered, or timed out): its job folder exists
        sandbox_id: str | None = None
        try:
            payload, elapsed = post.result()
            sandbox_id = str(payload.get("sandbox_id") or "") or None
        except _RunnerTimeout:
            # The Runner's budget ran out and it dropped the output: timed out, nothing kept.
            result.timed_out = True
            result.duration_ms = int((time.monotonic() - started) * 1000)
            result.notes.append(
                "the Runner's own timeout (container start included) ended the run and "
                "its answer lost the output"
            )
            return result
        except BaseException:
            ran = False  # the Runner may never have made the folder: only prune old ones
            raise
        finally:
            if self.jobs_dir:
                name = SNIPPET_FILES[language] if request.file is None else request.file.name
                await asyncio.to_thread(
                    functools.partial(
                        forget_run,
                        self.jobs_dir,
                        name,
                        request.code,
                        since,
                        ran=ran,
                        sandbox_id=sandbox_id,
                        marker=marker,
                        container=self.runner_container,
                    )
                )
        self._fill(result, payload, marker, timeout_sec, budget, elapsed, request.max_output_bytes)
        if on_output is not None:
            # The Runner answers once at the end: the output comes in one piece per stream.
            if result.stdout:
                await on_output("stdout", result.stdout)
            if result.stderr:
                await on_output("stderr", result.stderr)
        return result

    async def _remove_container(self, tag: str, post: asyncio.Future[Any]) -> str | None:
        """Remove the run's container: None once done (or the run ended), else why not.

        The container may still be starting when the stop comes: it is looked for
        during :data:`STOP_FIND_SEC`.
        """
        reason = stop_unavailable(self.url, self.environ)
        if reason is not None:
            return reason
        deadline = time.monotonic() + STOP_FIND_SEC
        while True:
            try:
                if await asyncio.to_thread(remove_tagged, tag):
                    return None
            except SandboxError as exc:
                return exc.message
            except Exception as exc:  # the engine refused: say what it said
                return f"the Docker engine refused to remove the container: {error_text(exc)}"
            if post.done():
                return None  # it ended by itself meanwhile
            if time.monotonic() >= deadline:
                return "no container of this run is on the Docker engine this server reaches"
            await asyncio.sleep(STOP_POLL_SEC)

    async def _stopped(
        self,
        result: RunResult,
        post: asyncio.Future[Any],
        tag: str,
        marker: str,
        budget: int,
        request: RunRequest,
        started: float,
    ) -> RunResult:
        """The envelope of a run stopped under way: its container removed where we can,
        with the output the Runner answered then; else a note that it goes on there."""
        reason = await self._remove_container(tag, post)
        if reason is None:
            # The Runner answers once its `docker run` sees the container gone.
            await asyncio.wait({post}, timeout=STOP_ANSWER_SEC)
        answered = post.done() and not post.cancelled() and post.exception() is None
        if answered:
            payload, _ = post.result()
            cap = request.max_output_bytes
            result.stdout, cut_out = cap_text(
                BANNER.sub("", str(payload.get("stdout") or ""), count=1), cap
            )
            stderr, _ = read_report(str(payload.get("stderr") or ""), marker)
            result.stderr, cut_err = cap_text(stderr, cap)
            result.truncated = bool(payload.get("truncated")) or cut_out or cut_err
            result.sandbox_id = str(payload["sandbox_id"]) if payload.get("sandbox_id") else None
        elif reason is not None:
            result.notes.append(
                f"Stop could not stop the run on the Runner ({reason}): it goes on there "
                f"until it ends or reaches its timeout of {budget} s"
            )
        result.cancelled = True
        result.duration_ms = int((time.monotonic() - started) * 1000)
        return result

    def _fill(
        self,
        result: RunResult,
        payload: dict[str, Any],
        marker: str,
        timeout_sec: int,
        budget: int,
        elapsed: float,
        cap: int,
    ) -> None:
        """The envelope from a Runner answer; the Runner's own failures raise 502."""
        exit_code: int = payload["exit_code"]
        raw_stdout = str(payload.get("stdout") or "")
        stdout = BANNER.sub("", raw_stdout, count=1)
        stderr, report = read_report(str(payload.get("stderr") or ""), marker)
        runner_cut = bool(payload.get("truncated"))
        duration_ms = payload.get("duration_ms")
        if report is not None:
            timed_out = report.timed_out(timeout_sec)
            exit_code = -1 if timed_out else report.exit_code
            duration_ms = report.elapsed_us // 1000
            if report.memory_exceeded(timeout_sec):
                stderr += MEMORY_EXCEEDED  # the container's memory limit killed it, as locally
        elif exit_code == RUNNER_TIMEOUT_EXIT and elapsed >= budget and TIMEOUT_MARK.search(stderr):
            # The Runner's budget ran out before our wrapper could report (a slow start).
            timed_out, exit_code = True, -1
            stderr = TIMEOUT_MARK.sub("", stderr)
        elif runner_cut and exit_code not in (RUNNER_ERROR_EXIT, DOCKER_RUN_FAILED_EXIT):
            # Our report was past the Runner's 10 MiB cap: its exit code is the snippet's,
            # and our clock says whether our timeout could have ended it.
            timed_out = exit_code in TIMEOUT_EXITS and elapsed >= timeout_sec
            exit_code = -1 if timed_out else exit_code
        else:
            # No report: the wrapper never finished, so the Runner or Docker failed the run.
            raise runner_failure(self.url, exit_code, stderr or raw_stdout)
        result.stdout, cut_out = cap_text(stdout, cap)
        result.stderr, cut_err = cap_text(stderr, cap)
        result.truncated = runner_cut or cut_out or cut_err
        result.timed_out = timed_out
        result.exit_code = exit_code
        result.sandbox_id = str(payload["sandbox_id"]) if payload.get("sandbox_id") else None
        result.duration_ms = duration_ms if isinstance(duration_ms, int) else int(elapsed * 1000)

    async def run(self, request: RunRequest, on_output: OutputCallback | None = None) -> RunResult:
        """Run one snippet or file under our wrapper.

        A snippet goes to ``POST /code/run`` as a bash script that writes its file and
        runs it (the Runner serves that route in a worker thread, so runs overlap and
        ``/health`` answers meanwhile). A file run (``request.file``) goes to
        ``POST /run`` with the file's folder zipped, so the file can import its
        neighbours; so does a run with inputs (their copies in the workspace at
        ``NAME``) and a snippet or stdin beyond ``/code/run``'s 1,000,000 characters.
        What runs is always the approved ``code``.
        """
        language = canonical_language(request.language)
        named = request.named_after  # a file run's, or the file the code was read from
        filename = SNIPPET_FILES[language] if named is None else Path(named).name
        argv = [INTERPRETERS[language], f"$PWD/{filename}"]
        command = self.display_command(language, None if named is None else filename)
        marker = new_marker()
        stdin = request.stdin
        code_run = request.file is None and not request.inputs  # inputs go in a workspace
        if code_run and (stdin is None or len(stdin) <= MAX_CODE_RUN_CHARS):
            script = snippet_script(
                request.code, filename, argv, request.timeout_sec, marker, stdin=stdin is not None
            )
            if len(script) <= MAX_CODE_RUN_CHARS:
                body: dict[str, Any] = {"language": "bash", "code": script}
                if stdin is not None:
                    body["stdin"] = stdin
                return await self._execute(
                    "/code/run",
                    body,
                    marker=marker,
                    language=language,
                    command=command,
                    request=request,
                    on_output=on_output,
                )
        files = {filename: request.code}
        if stdin is not None:
            files[STDIN_FILE] = stdin
        archive = await asyncio.to_thread(
            zip_workspace,
            None if request.file is None else request.file.parent,
            self.max_workspace_mb * 1024 * 1024,
            extra=files,
            inputs=request.inputs,
        )
        body = {
            "cmd": wrapped_command(
                argv, request.timeout_sec, marker, stdin="file" if stdin is not None else "none"
            ),
            "cwd": ".",
            "workspace": {"type": "zip", "zip_base64": archive},  # streamed from its file
        }
        return await self._execute(
            "/run",
            body,
            marker=marker,
            language=language,
            command=command,
            request=request,
            on_output=on_output,
        )


def _settle(post: asyncio.Future[Any], slots: RunnerSlots) -> None:
    """A run's answer is in (or given up): its slot goes back, its error is consumed."""
    slots.release()
    if not post.cancelled():
        post.exception()


class _RunnerTimeout(Exception):
    """The Runner's 500 for a run that wrote to stderr and hit its timeout."""
