"""A stand-in for the MatrixLab Runner (protocol ``matrixlab.runner.v1``), for tests.

It follows ``docs/dev/matrixlab-runner.md`` as the real Runner behaves, quirks included:
the banner line on stdout, exit 124 with ``TIMEOUT`` at the end of stderr on
timeout, a 500 instead when the snippet wrote to stderr before timing out,
FastAPI-shaped errors (``{"detail": ...}``, 401 body, 422 lists), ``/health``
with ``ok`` and ``docker``, ``/capabilities``, ``/run`` with a zip workspace,
and ``/repo/run`` refusing anything without ``repo_url``. Snippets run as local
child processes (the stand-in plays the container too).

Standard library only: it also runs as a plain script inside a Docker image.

    python -m tests.support.runner_standin --port 0 --token T --mode ok

``GET /_standin/requests`` (not in the real Runner) lists the last POSTs it
received, so tests can check what the client sent. ``--port 0`` picks a free
port; the first stdout line is ``listening on URL``.
Modes: ``ok``, ``down-docker`` (health ``ok: false``, runs fail), ``slow``
(every answer waits ``--delay`` seconds), ``error500`` (every POST is a 500),
``error500-timeout`` (every POST is at once a 500 that mentions a timeout),
``garbage`` (every POST answers 200 with invalid JSON), ``old`` (no ``/code/run``
nor ``/run``: a Runner too old), ``no-banner`` (stdout without the banner).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VERSION = "0.1.0"
PROTOCOL = "matrixlab.runner.v1"
BANNER = "== Matrix Lab step: command ==\n"
OUTPUT_CAP = 10 * 1024 * 1024
MODES = ("ok", "down-docker", "slow", "error500", "error500-timeout", "garbage", "old", "no-banner")
LANGUAGES = {"python": "main.py", "javascript": "main.js", "node": "main.js", "bash": "main.sh"}
ENDPOINTS = [
    "/health",
    "/capabilities",
    "/run",
    "/code/run",
    "/chat/run",
    "/repo/run",
    "/workspaces/upload",
    "/runs/{sandbox_id}/events",
    "/runs/{sandbox_id}/artifacts",
]


def _interpreter(language: str) -> list[str]:
    if language == "python":
        return [sys.executable or "python3"]
    if language in ("javascript", "node"):
        return ["node"]
    return ["bash"]


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _decode(data: bytes) -> tuple[str, bool]:
    truncated = len(data) > OUTPUT_CAP
    return data[:OUTPUT_CAP].decode("utf-8", errors="replace"), truncated


class Invalid(Exception):
    """A request of the wrong shape: answered 422 as FastAPI does."""

    def __init__(self, loc: list[Any], msg: str, status: int = 422) -> None:
        super().__init__(msg)
        self.loc, self.msg, self.status = loc, msg, status

    def body(self) -> dict[str, Any]:
        if self.status != 422:
            return {"detail": self.msg}
        return {"detail": [{"type": "value_error", "loc": ["body", *self.loc], "msg": self.msg}]}


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


class Runner:
    """The state and behaviour behind the HTTP handler."""

    def __init__(self, token: str, mode: str, delay: float) -> None:
        self.token, self.mode, self.delay = token, mode, delay
        self.uploads: dict[str, bytes] = {}
        self.events: dict[str, list[dict[str, Any]]] = {}
        #: The last POSTs (path, body), for tests at GET /_standin/requests.
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    # -- execution ------------------------------------------------------------------

    def execute(
        self, argv: list[str], cwd: str, stdin: str | None, timeout: int, env: dict[str, Any]
    ) -> dict[str, Any]:
        child_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": cwd,
            "LANG": "C.UTF-8",
        }
        child_env.update({str(k): str(v) for k, v in env.items()})
        started = time.monotonic()
        sandbox_id = "sbx_" + uuid.uuid4().hex[:12]
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=child_env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return self._result(sandbox_id, 127, b"", str(exc).encode(), started, False)
        data = stdin.encode("utf-8") if stdin is not None else None
        timed_out = False
        try:
            out, err = proc.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            out, err = proc.communicate()
        code = 124 if timed_out else proc.returncode
        if timed_out and err:
            # The real Runner of this version fails this way: see docs/dev/matrixlab-runner.md.
            raise Invalid([], f"run failed: command timed out after {timeout} s", status=500)
        if timed_out:
            err += b"TIMEOUT\n"
        return self._result(sandbox_id, code, out, err, started, timed_out)

    def _result(
        self, sandbox_id: str, code: int, out: bytes, err: bytes, started: float, timed_out: bool
    ) -> dict[str, Any]:
        stdout, cut_out = _decode(out)
        stderr, cut_err = _decode(err)
        if self.mode != "no-banner":
            stdout = BANNER + stdout
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
            "timed_out": timed_out,
            "truncated": cut_out or cut_err,
            "artifacts": [],
        }

    def code_run(self, body: dict[str, Any]) -> dict[str, Any]:
        language = _field(body, "language", str, "python")
        if language not in LANGUAGES:
            raise Invalid(["language"], "Input should be 'python', 'javascript', 'node' or 'bash'")
        code = body.get("code")
        if not isinstance(code, str) or not 1 <= len(code) <= 1_000_000:
            raise Invalid(["code"], "Field required" if code is None else "Invalid code")
        stdin = _field(body, "stdin", str)
        packages = _field(body, "packages", list, [])
        common = _common(body)
        if packages and not common["allow_network"]:
            raise Invalid(["packages"], "packages need allow_network: true", status=400)
        folder = tempfile.mkdtemp(prefix="standin-")
        try:
            filename = LANGUAGES[language]
            with open(os.path.join(folder, filename), "w", encoding="utf-8") as fh:
                fh.write(code)
            argv = [*_interpreter(language), filename]
            result = self.execute(argv, folder, stdin, common["timeout"], common["env"])
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        result["language"] = language
        result["console"] = []
        return result

    def workspace_run(self, body: dict[str, Any]) -> dict[str, Any]:
        cmd = body.get("cmd")
        if not isinstance(cmd, str) or not cmd:
            raise Invalid(["cmd"], "Field required")
        cwd = _field(body, "cwd", str, ".")
        if cwd.startswith("/") or ".." in cwd.split("/"):
            raise Invalid(["cwd"], "cwd must be relative and must not contain '..'")
        workspace = body.get("workspace")
        if not isinstance(workspace, dict) or workspace.get("type") != "zip":
            raise Invalid(["workspace"], "Field required")
        common = _common(body)
        if "upload_id" in workspace:
            data = self.uploads.get(str(workspace["upload_id"]))
            if data is None:
                raise Invalid([], "unknown upload_id", status=404)
        else:
            try:
                data = base64.b64decode(str(workspace.get("zip_base64", "")), validate=True)
            except ValueError:
                raise Invalid(["workspace", "zip_base64"], "invalid base64") from None
        folder = tempfile.mkdtemp(prefix="standin-ws-")
        try:
            try:
                with zipfile.ZipFile(io.BytesIO(data)) as archive:
                    archive.extractall(folder)
            except zipfile.BadZipFile:
                raise Invalid([], "workspace is not a zip file", status=400) from None
            workdir = os.path.join(folder, cwd)
            if not os.path.isdir(workdir):
                raise Invalid([], f"cwd {cwd!r} is not a folder of the workspace", status=400)
            return self.execute(
                ["bash", "-c", cmd], workdir, None, common["timeout"], common["env"]
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    # -- routes ---------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        docker_ok = self.mode != "down-docker"
        docker: dict[str, Any] = {"ok": docker_ok}
        if not docker_ok:
            docker["error"] = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock"
        return {
            "ok": docker_ok,
            "service": "matrixlab-runner",
            "version": VERSION,
            "docker": docker,
        }

    def capabilities(self) -> dict[str, Any]:
        endpoints = ENDPOINTS
        if self.mode == "old":
            endpoints = ["/health", "/capabilities", "/repo/run"]
        return {
            "version": VERSION,
            "protocol": PROTOCOL,
            "images": {"python": "ruslanmv/matrix-lab-sandbox-python:latest"},
            "image_aliases": {"python": "python", "node": "node", "javascript": "node"},
            "features": {
                "code_run": self.mode != "old",
                "workspace_zip": self.mode != "old",
                "streaming": False,
                "artifacts": True,
                "network_policy": True,
                "warm_pool": False,
            },
            "limits": {
                "max_timeout_sec": 900,
                "max_output_bytes": OUTPUT_CAP,
                "max_workspace_bytes": 500 * 1024 * 1024,
                "max_artifact_bytes": 50 * 1024 * 1024,
            },
            "status": "ok",
            "endpoints": endpoints,
        }

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path in ("/code/run", "/chat/run") and self.mode != "old":
            return self.code_run(body)
        if path == "/run" and self.mode != "old":
            return self.workspace_run(body)
        if path == "/repo/run":
            if not isinstance(body.get("repo_url"), str):
                raise Invalid(["repo_url"], "Field required")
            raise Invalid([], "cloning repositories is not supported by the stand-in", status=400)
        if path == "/workspaces/upload":
            try:
                data = base64.b64decode(str(body.get("zip_base64", "")), validate=True)
            except ValueError:
                raise Invalid(["zip_base64"], "invalid base64") from None
            upload_id = "upl_" + uuid.uuid4().hex[:12]
            with self.lock:
                self.uploads[upload_id] = data
            return {"upload_id": upload_id, "size": len(data)}
        raise Invalid([], "Not Found", status=404)


class Handler(BaseHTTPRequestHandler):
    """HTTP face of :class:`Runner`, FastAPI-shaped answers."""

    server_version = "uvicorn"
    protocol_version = "HTTP/1.1"
    runner: Runner

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, payload: Any, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        token = self.runner.token
        return not token or self.headers.get("Authorization") == f"Bearer {token}"

    def do_GET(self) -> None:
        runner = self.runner
        if runner.mode == "slow":
            time.sleep(runner.delay)
        path = self.path.split("?", 1)[0]
        if path == "/health":
            return self._send(200, runner.health())
        if path == "/capabilities":
            return self._send(200, runner.capabilities())
        if path == "/_standin/requests":
            with runner.lock:
                return self._send(200, {"requests": runner.requests})
        if not self._authorized():
            return self._send(401, {"detail": "missing or invalid bearer token"})
        parts = path.strip("/").split("/")
        if len(parts) == 3 and parts[0] == "runs" and parts[2] == "events":
            with runner.lock:
                events = runner.events.get(parts[1])
            if events is None:
                return self._send(404, {"detail": "run not found"})
            return self._send(200, {"sandbox_id": parts[1], "events": events})
        return self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        runner = self.runner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if runner.mode == "slow":
            time.sleep(runner.delay)
        if not self._authorized():
            return self._send(401, {"detail": "missing or invalid bearer token"})
        if runner.mode == "error500":
            trace = "".join(f"  frame {i}: in handler\n" for i in range(60))
            detail = f"Internal Server Error: runner exploded (stand-in)\n{trace}END-OF-BODY"
            return self._send(500, {"detail": detail})
        if runner.mode == "error500-timeout":
            return self._send(500, {"detail": "docker: context deadline exceeded (timeout)"})
        if runner.mode == "garbage":
            return self._send(200, None, raw=b"<html>not json {")
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        with runner.lock:
            runner.requests = [*runner.requests[-49:], {"path": self.path, "body": body}]
        try:
            if not isinstance(body, dict):
                raise Invalid([], "Input should be a valid dictionary or object")
            if runner.mode == "down-docker" and self.path != "/repo/run":
                raise Invalid([], "Docker is not available: cannot connect to the daemon", 500)
            return self._send(200, runner.post(self.path, body))
        except Invalid as exc:
            return self._send(exc.status, exc.body())


def main(argv: list[str] | None = None) -> int:
    """Serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument(
        "--token",
        default=os.environ.get("MATRIXLAB_BEARER_TOKEN", ""),
        help="bearer token for protected routes (default: $MATRIXLAB_BEARER_TOKEN)",
    )
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--delay", type=float, default=3.0, help="seconds of delay in slow mode")
    args = parser.parse_args(argv)
    Handler.runner = Runner(args.token, args.mode, args.delay)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
    print(f"listening on http://{shown}:{port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
