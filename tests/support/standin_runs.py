"""The run path of the MatrixLab Runner stand-in (:mod:`tests.support.runner_standin`).

:class:`Runs` checks a ``/code/run`` or ``/run`` body as the Runner does, runs its step
as a local process group (the stand-in playing the container) or, with
``--docker-image``, as a real container on the Docker engine
(:mod:`tests.support.standin_docker`), and answers it with the Runner's quirks.
Standard library only, like the stand-in.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from typing import Any

from tests.support.standin_docker import attach, docker

BANNER = "== Matrix Lab step: command ==\n"
OUTPUT_CAP = 10 * 1024 * 1024
LANGUAGES = {"python": "main.py", "javascript": "main.js", "node": "main.js", "bash": "script.sh"}
#: The real Runner's image aliases; a name that is none of them is used as is.
IMAGE_ALIASES = {
    alias: f"matrix-lab-sandbox-{alias}:latest"
    for alias in ("utils", "python", "node", "go", "rust", "build")
}
#: What the Runner's images set in their environment (sandbox-python/Dockerfile of 0.1.0):
#: unbuffered Python keeps a killed snippet's printed output.
IMAGE_ENV = {
    IMAGE_ALIASES["python"]: {
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
}
#: Repositories the stand-in's "Docker" can run; any other image fails to pull (exit 125).
RUNNABLE_REPOSITORIES = ("python", "node", "debian", "ubuntu", "python3-only")
STDIN_MAX = 1_000_000


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _text(data: bytes) -> str:
    """Decode as the Runner's ``subprocess.run(text=True)``: strict UTF-8, universal newlines."""
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


def _cap(text: str) -> tuple[str, bool]:
    data = text.encode("utf-8", errors="ignore")
    if len(data) <= OUTPUT_CAP:
        return text, False
    return data[:OUTPUT_CAP].decode("utf-8", errors="ignore"), True


def resolve_image(image: str | None) -> str:
    """The image a request's ``image`` names: an alias, else the name as is."""
    return IMAGE_ALIASES.get((image or "python").strip(), image or "python")


def _runnable(image: str) -> bool:
    repository = _repository(image)
    return repository.startswith("matrix-lab-sandbox-") or repository in RUNNABLE_REPOSITORIES


def _pull_error(image: str) -> str:
    reference = image if ":" in image.rsplit("/", 1)[-1] else f"{image}:latest"
    repository = reference.rsplit(":", 1)[0]
    return (
        f"Unable to find image '{reference}' locally\n"
        f"docker: Error response from daemon: pull access denied for {repository}, "
        "repository does not exist or may require 'docker login': denied: requested "
        "access to the resource is denied.\nSee 'docker run --help'.\n"
    )


# -- images with only python3 (status must not say OK for them) -----------------------------

#: Repositories whose "container" has ``python3`` and the basic tools but no ``python``,
#: as some slim images: every ``python`` run fails with 127.
PYTHON3_ONLY_REPOSITORIES = ("python3-only",)
#: The commands such an image has besides ``python3``.
BASIC_TOOLS = ("bash", "sh", "timeout", "rm", "cat", "truncate", "env", "ls", "find", "sort")


def _repository(image: str) -> str:
    return image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]


def python3_only_path() -> str:
    """A PATH with ``python3`` and :data:`BASIC_TOOLS` only (made once per process)."""
    folder = tempfile.mkdtemp(prefix="standin-python3-only-")
    os.symlink(sys.executable or "/usr/bin/python3", os.path.join(folder, "python3"))
    for tool in BASIC_TOOLS:
        found = shutil.which(tool)
        if found:
            os.symlink(found, os.path.join(folder, tool))
    return folder


class Invalid(Exception):
    """A request of the wrong shape: answered 422 as FastAPI does."""

    def __init__(self, loc: list[Any], msg: str, status: int = 422) -> None:
        super().__init__(msg)
        self.loc, self.msg, self.status = loc, msg, status

    #: FastAPI's error type and what it echoes back (``input``) for a 422.
    kind = "value_error"
    echoed: Any = None

    def body(self) -> dict[str, Any]:
        if self.status != 422:
            return {"detail": self.msg}
        item = {"type": self.kind, "loc": ["body", *self.loc], "msg": self.msg}
        if self.echoed is not None:
            item["input"] = self.echoed
        return {"detail": [item]}


def _bounded(body: dict[str, Any], name: str, default: int, low: int, high: int) -> int:
    value: int = _field(body, name, int, default)
    if not low <= value <= high:
        error = Invalid([name], f"Input should be between {low} and {high}")
        error.kind = "greater_than_equal" if value < low else "less_than_equal"
        error.echoed = value
        raise error
    return value


def _field(body: dict[str, Any], name: str, kind: Any, default: Any = None) -> Any:
    value = body.get(name, default)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise Invalid([name], f"Input should be a valid {getattr(kind, '__name__', kind)}")
    return value


def _common(body: dict[str, Any]) -> dict[str, Any]:
    timeout = _field(body, "timeout", int, 120)
    if not 1 <= timeout <= 86400:
        raise Invalid(["timeout"], "Input should be between 1 and 86400")
    env = _field(body, "env", dict, {})
    allow_network = _field(body, "allow_network", bool, False)
    _field(body, "metadata", dict, {})
    _field(body, "image", str)
    return {"timeout": min(timeout, 900), "env": env, "allow_network": allow_network}


class Runs:
    """The stand-in's state and its run path: a step checked, run (as a local process
    group or a real container) and answered as the Runner answers it."""

    def __init__(
        self,
        token: str,
        mode: str,
        delay: float,
        *,
        workers: int = 0,
        start_per_run: float = 0.0,
        docker_image: str = "",
    ) -> None:
        self.token, self.mode, self.delay = token, mode, delay
        #: The limits the last run asked for, for tests at GET /_standin/requests.
        self.last_limits: dict[str, Any] = {}
        #: A folder with ``python`` -> this interpreter, first on the runs' PATH.
        self.bin_dir = tempfile.mkdtemp(prefix="standin-bin-")
        os.symlink(sys.executable or "/usr/bin/python3", os.path.join(self.bin_dir, "python"))
        #: The whole PATH of an image from :data:`PYTHON3_ONLY_REPOSITORIES`.
        self.python3_only_path = python3_only_path()
        #: The Runner's own state folder, as Runner 0.1.0: ``MATRIXLAB_STATE_DIR``, else
        #: ``runner_state`` in its working folder (``/app/runner_state`` in its image).
        #: It keeps ``seeds/seed_*`` (each run's workspace: code, stdin), ``runs/<id>/
        #: metadata.json`` (its stdout and stderr) and ``uploads/ws_*.zip``, and deletes none.
        self.state_dir = os.environ.get("MATRIXLAB_STATE_DIR") or os.path.join(
            os.getcwd(), "runner_state"
        )
        self.events: dict[str, list[dict[str, Any]]] = {}
        #: The last POSTs (path, body), for tests at GET /_standin/requests.
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        #: Mode ``busy``: requests handled at once, and each run in progress adds this
        #: much to a container's start (see :meth:`handler_slot`).
        self.handlers = threading.BoundedSemaphore(workers) if workers > 0 else None
        self.start_per_run = start_per_run
        #: Held by a /run for its whole run (see :meth:`on_event_loop`).
        self.event_loop = threading.Lock()
        self.running = 0
        #: ``--docker-image``: runs are real containers of this image (see :meth:`run_container`).
        self.docker_image = docker_image

    # -- execution ------------------------------------------------------------------

    def execute(self, command: str, workspace: str, cwd: str, body: dict[str, Any]) -> dict:
        """One step as the Runner runs it: ``docker run ... image bash -lc <step script>``."""
        common = _common(body)
        image = resolve_image(_field(body, "image", str))
        env = {str(k): str(v) for k, v in common["env"].items()}
        self.last_limits = {
            key: body.get(key) for key in ("mem_limit_mb", "pids_limit", "cpu_limit")
        }
        started = time.monotonic()
        sandbox_id = "sbx_" + uuid.uuid4().hex[:12]
        if not _runnable(image):
            return self._result(sandbox_id, 125, "", _pull_error(image), started)
        exports = " ".join(f"{shlex.quote(k)}={shlex.quote(v)}" for k, v in env.items())
        home = "/workspace" if self.docker_image else workspace
        script = "\n".join(
            [
                "set -euo pipefail",
                f"export HOME={shlex.quote(home)}",
                f"export {exports}" if exports else "",
                "" if self.mode == "no-banner" else 'echo "== Matrix Lab step: command =="',
                f"cd {shlex.quote(cwd)}",
                command,
            ]
        )
        if self.docker_image:
            with self.in_progress():
                return self.run_container(script, workspace, body, sandbox_id, started)
        child_env = {
            "PATH": f"{self.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "LANG": "C.UTF-8",
            **IMAGE_ENV.get(image, {}),
        }
        if _repository(image) in PYTHON3_ONLY_REPOSITORIES:
            child_env["PATH"] = self.python3_only_path
        timeout = common["timeout"]
        if self.mode == "slow-start":
            # The container's start counts in the Runner's timeout.
            time.sleep(self.delay)
        with self.in_progress() as others:
            if self.mode == "busy":
                time.sleep(self.delay + self.start_per_run * others)
            return self._run_local(script, workspace, child_env, timeout, sandbox_id, started)

    def _run_local(
        self,
        script: str,
        workspace: str,
        child_env: dict[str, str],
        timeout: int,
        sandbox_id: str,
        started: float,
    ) -> dict[str, Any]:
        """The step as a local process group (the stand-in playing the container)."""
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=workspace,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=max(0.01, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, err = proc.communicate()
            return self._answer(sandbox_id, 124, out, err, started, timed_out=True)
        return self._answer(sandbox_id, proc.returncode, out, err, started)

    def _answer(
        self,
        sandbox_id: str,
        code: int,
        out: bytes,
        err: bytes,
        started: float,
        *,
        timed_out: bool = False,
    ) -> dict[str, Any]:
        """The Runner's answer for a step's captured bytes, its quirks included."""
        if timed_out:
            if err:
                # The real Runner adds str to the bytes TimeoutExpired carries (its 500 bug).
                raise Invalid([], "can't concat str to bytes", status=500)
            return self._result(
                sandbox_id, 124, out.decode("utf-8", "replace"), "\nTIMEOUT", started
            )
        try:
            stdout, stderr = _text(out), _text(err)
        except UnicodeDecodeError as exc:
            return self._result(sandbox_id, 999, "", f"Runner error: {exc}", started)
        return self._result(sandbox_id, code, stdout, stderr, started)

    # -- load (mode busy) -----------------------------------------------------------
    # Seen on Runner 0.1.0 with 12-16 runs at once: requests past its workers wait before
    # their handler starts (outside the run's timeout), and each container starts more
    # slowly the more run beside it (the start counts in the run's timeout).

    @contextlib.contextmanager
    def handler_slot(self) -> Iterator[None]:
        """Mode ``busy``: wait for one of ``--workers`` handlers, as queued requests do."""
        if self.mode != "busy" or self.handlers is None:
            yield
            return
        with self.handlers:
            yield

    @contextlib.contextmanager
    def in_progress(self) -> Iterator[int]:
        """Count a run in progress; yields how many others are."""
        with self.lock:
            others = self.running
            self.running += 1
        try:
            yield others
        finally:
            with self.lock:
                self.running -= 1

    # -- the event loop ---------------------------------------------------------------
    # Runner 0.1.0 serves /run as an async route that runs blocking code: while one runs,
    # its event loop answers nothing else (/health neither); runs already in worker
    # threads (/code/run) go on.

    @contextlib.contextmanager
    def on_event_loop(self, hold: bool = False) -> Iterator[None]:
        """Wait for the event loop; ``hold`` keeps it for the whole request (a /run)."""
        if hold:
            with self.event_loop:
                yield
            return
        with self.event_loop:
            pass
        yield

    # -- real containers (--docker-image) -------------------------------------------
    # The Runner's own `docker run --rm --name mlab-<job>-command-<hex> ... bash -lc <step>`
    # through the engine's API on its socket: no label, the request's env only in the
    # step script. The workspace is bind-mounted (the jobs folder has the same path for
    # the engine). A container removed under it ends the run as `docker run` does: 137
    # with the output so far.

    def run_container(
        self, script: str, workspace: str, body: dict[str, Any], sandbox_id: str, started: float
    ) -> dict[str, Any]:
        common = _common(body)
        name = f"mlab-{sandbox_id[4:12]}-command-{uuid.uuid4().hex[:4]}"
        output = os.path.join(os.path.dirname(workspace), "out")
        os.makedirs(output, exist_ok=True)
        for folder in (workspace, output):
            os.chmod(folder, 0o777)
        create = {
            "Image": self.docker_image,
            "Cmd": ["bash", "-lc", script],
            "WorkingDir": "/workspace",
            "HostConfig": {
                "Init": True,
                "ReadonlyRootfs": True,
                "CapDrop": ["ALL"],
                "SecurityOpt": ["no-new-privileges"],
                "IpcMode": "none",
                "NetworkMode": "bridge" if common["allow_network"] else "none",
                "Memory": int(body.get("mem_limit_mb") or 1024) * 1024 * 1024,
                "PidsLimit": int(body.get("pids_limit") or 256),
                "NanoCpus": int(float(body.get("cpu_limit") or 1.0) * 1e9),
                "Binds": [f"{workspace}:/workspace:rw", f"{output}:/output:rw"],
                "Tmpfs": {"/tmp": "rw,noexec,nosuid,size=256m"},
            },
        }
        status, answer = docker("POST", f"/containers/create?name={name}", create)
        if status != 201:
            return self._result(sandbox_id, 125, "", f"docker: {answer.decode()}\n", started)
        cid = json.loads(answer)["Id"]
        docker("POST", f"/containers/{cid}/start")
        remaining = max(0.01, common["timeout"] - (time.monotonic() - started))
        out, err, timed_out = attach(cid, remaining)
        if timed_out:
            docker("POST", f"/containers/{cid}/kill")
        status, answer = docker("POST", f"/containers/{cid}/wait")
        code = json.loads(answer)["StatusCode"] if status == 200 else 137
        for _ in range(20):  # --rm (the engine may still be finishing the exit)
            if docker("DELETE", f"/containers/{cid}?force=1")[0] in (204, 404):
                break
            time.sleep(0.1)
        return self._answer(sandbox_id, code, out, err, started, timed_out=timed_out)

    def _result(
        self, sandbox_id: str, code: int, stdout: str, stderr: str, started: float
    ) -> dict[str, Any]:
        stdout, cut_out = _cap(stdout)
        stderr, cut_err = _cap(stderr)
        with self.lock:
            self.events[sandbox_id] = [
                {"type": "stdout", "data": stdout},
                {"type": "stderr", "data": stderr},
                {"type": "exit", "exit_code": code},
            ]
        return {
            "sandbox_id": sandbox_id,
            "exit_code": code,
            "stdout": stdout,
            "stderr": stderr,
            "duration_ms": int((time.monotonic() - started) * 1000),
            # The real Runner's rule, which a snippet can trigger on its own.
            "timed_out": code == 124 or "TIMEOUT" in stderr,
            "truncated": cut_out or cut_err,
            "artifacts": [],
        }

    # -- what the Runner keeps (native.py of Runner 0.1.0) ----------------------------

    def new_seed(self) -> str:
        """A fresh ``seeds/seed_<hex>`` folder, never deleted (the Runner's workspace seed)."""
        seed = os.path.join(self.state_dir, "seeds", f"seed_{uuid.uuid4().hex}")
        os.makedirs(seed)
        return seed

    def keep_upload(self, data: bytes) -> str:
        """Store an upload as ``uploads/ws_<hex>.zip``, never deleted: its ``upload_id``."""
        upload_id = f"ws_{uuid.uuid4().hex}"
        uploads = os.path.join(self.state_dir, "uploads")
        os.makedirs(uploads, exist_ok=True)
        with open(os.path.join(uploads, f"{upload_id}.zip"), "wb") as fh:
            fh.write(data)
        return upload_id

    def upload(self, upload_id: str) -> bytes | None:
        """The stored upload ``upload_id``, or None."""
        if os.path.basename(upload_id) != upload_id:
            return None
        try:
            with open(os.path.join(self.state_dir, "uploads", f"{upload_id}.zip"), "rb") as fh:
                return fh.read()
        except OSError:
            return None

    def persist(self, result: dict[str, Any], workspace: str) -> None:
        """``runs/<sandbox_id>/metadata.json`` (the answer and its ``out_dir``), and the
        job's ``out/stdout.log`` and ``out/stderr.log``, as the Runner writes them."""
        out_dir = os.path.join(os.path.dirname(workspace), "out")
        if os.path.isdir(out_dir):
            for stream in ("stdout", "stderr"):
                with open(os.path.join(out_dir, f"{stream}.log"), "w", encoding="utf-8") as fh:
                    fh.write(result[stream])
        run_dir = os.path.join(self.state_dir, "runs", str(result["sandbox_id"]))
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "metadata.json"), "w", encoding="utf-8") as fh:
            json.dump({**result, "out_dir": out_dir}, fh, indent=2)

    def run_seeded(self, seed: str, command: str, cwd: str, body: dict[str, Any]) -> dict[str, Any]:
        """Copy the seed into a job's workspace, run ``command`` there, keep the record."""
        with self.job_folder() as workspace:
            shutil.copytree(seed, workspace, dirs_exist_ok=True)
            result = self.execute(command, workspace, cwd, body)
            self.persist(result, workspace)
            return result

    @contextlib.contextmanager
    def job_folder(self) -> Iterator[str]:
        """The run's workspace: kept under MATRIXLAB_LOCAL_JOBS_DIR (never deleted), else temp."""
        jobs = os.environ.get("MATRIXLAB_LOCAL_JOBS_DIR")
        if jobs:
            os.makedirs(jobs, exist_ok=True)
            job = tempfile.mkdtemp(prefix=f"job-{uuid.uuid4()}-", dir=jobs)
            os.makedirs(os.path.join(job, "out"))
            workspace = os.path.join(job, "ws")
            os.makedirs(workspace)
            yield workspace
            return
        folder = tempfile.mkdtemp(prefix="standin-ws-")
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def code_run(self, body: dict[str, Any]) -> dict[str, Any]:
        language = _field(body, "language", str, "python")
        if language not in LANGUAGES:
            raise Invalid(["language"], "Input should be 'python', 'javascript', 'node' or 'bash'")
        code = body.get("code")
        if not isinstance(code, str) or not 1 <= len(code) <= 1_000_000:
            raise Invalid(["code"], "Field required" if code is None else "Invalid code")
        stdin = _field(body, "stdin", str)
        if stdin is not None and len(stdin) > STDIN_MAX:
            error = Invalid(["stdin"], f"String should have at most {STDIN_MAX} characters")
            error.kind, error.echoed = "string_too_long", stdin
            raise error
        _bounded(body, "mem_limit_mb", 1024, 128, 32768)
        _bounded(body, "pids_limit", 256, 16, 4096)
        packages = _field(body, "packages", list, [])
        if packages and not _field(body, "allow_network", bool, False):
            raise Invalid(["packages"], "packages need allow_network: true", status=400)
        filename = LANGUAGES[language]
        interpreter = {"python": "python", "bash": "bash"}.get(language, "node")
        command = f"{interpreter} {filename}" + (" < stdin.txt" if stdin is not None else "")
        default_image = {"python": "python", "bash": "utils"}.get(language, "node")
        run_body = {**body, "image": body.get("image") or default_image}
        seed = self.new_seed()
        with open(os.path.join(seed, filename), "w", encoding="utf-8") as fh:
            fh.write(code)
        if stdin is not None:
            with open(os.path.join(seed, "stdin.txt"), "w", encoding="utf-8") as fh:
                fh.write(stdin)
        result = self.run_seeded(seed, command, ".", run_body)
        result["language"] = language
        result["console"] = []
        return result

    def workspace_run(self, body: dict[str, Any]) -> dict[str, Any]:
        cmd = body.get("cmd")
        if not isinstance(cmd, str) or not cmd:
            raise Invalid(["cmd"], "Field required")
        cwd = _field(body, "cwd", str, ".")
        if cwd.startswith("/") or ".." in cwd.split("/"):
            raise Invalid([], "cwd must be a relative path inside the workspace", status=500)
        workspace = body.get("workspace")
        if not isinstance(workspace, dict) or workspace.get("type") != "zip":
            raise Invalid(["workspace"], "Field required")
        _common(body)
        if "upload_id" in workspace:
            data = self.upload(str(workspace["upload_id"]))
            if data is None:
                raise Invalid([], "unknown upload_id", status=404)
        else:
            try:
                data = base64.b64decode(str(workspace.get("zip_base64", "")), validate=True)
            except ValueError:
                raise Invalid(["workspace", "zip_base64"], "invalid base64") from None
        seed = self.new_seed()
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                archive.extractall(seed)
        except zipfile.BadZipFile:
            raise Invalid([], "File is not a zip file", status=500) from None
        return self.run_seeded(seed, cmd, cwd, body)
