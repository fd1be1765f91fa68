"""A stand-in for the MatrixLab Runner (protocol ``matrixlab.runner.v1``), for tests.

It follows ``docs/dev/matrixlab-runner.md`` as the real Runner 0.1.0 behaves, quirks
included (section "Behaviour observed on the real Runner 0.1.0"), in every mode:

* the banner line on stdout (the step script echoes it before the command);
* the timeout counts the whole "container" (``slow-start`` adds its start time);
  a run killed at it answers exit 124 with ``\nTIMEOUT`` appended to stderr, but
  **500** ``{"detail": "can't concat str to bytes"}`` when it had written to stderr;
* ``timed_out`` is true for any exit 124 or any ``TIMEOUT`` on stderr;
* output that is not UTF-8 is exit **999** ``Runner error: ...``; an image that is
  neither an alias nor known (``bash`` is not an alias) is exit **125** with
  Docker's pull error, without the banner; an image named ``python3-only`` has
  ``python3`` but no ``python`` (a ``python`` run exits 127);
* ``\r\n`` and lone ``\r`` become ``\n`` in captured output;
* ``/code/run`` refuses stdin over 1,000,000 characters (422 ``string_too_long``,
  whose ``input`` echoes the stdin, as FastAPI does), memory below 128 MB and pids
  below 16; there is no file-size limit;
* ``/health`` and ``/capabilities`` need no token;
* the Runner's python image's environment (``PYTHONUNBUFFERED=1``...);
* no cancel: a run goes on when its client hangs up;
* ``/run`` blocks the event loop: while one runs, nothing else is answered;
* ``busy``: requests past ``--workers`` wait before their handler starts, and each
  run in progress adds ``--start-per-run`` seconds to a container's start;
* ``--docker-image IMAGE``: runs are real containers on the Docker engine, named and
  made as the Runner makes them (``mlab-<job>-command-<hex>``, no label, the request's
  env in the container's command);
* with ``MATRIXLAB_LOCAL_JOBS_DIR`` set, each run leaves a ``job-*`` folder there
  that is never deleted (``ws/``, ``out/`` with ``stdout.log`` and ``stderr.log``);
  whatever is set, each run leaves its seed (``seeds/seed_*``: code, ``stdin.txt``) and
  its record (``runs/<sandbox_id>/metadata.json``: the answer) and each upload its zip
  (``uploads/ws_*.zip``) in ``MATRIXLAB_STATE_DIR`` (default ``runner_state`` in the
  working folder, ``/app/runner_state`` in its image), never deleted;
* ``--require-docker-socket`` exits at start without ``/var/run/docker.sock`` (the
  real Runner's preflight), as in its image.

FastAPI-shaped errors (``{"detail": ...}``, 401 body, 422 lists), ``/run`` with a
zip workspace, and ``/repo/run`` refusing anything without ``repo_url``. Runs are
local child processes (the stand-in plays the container too, in a temp folder
instead of ``/workspace``). This module is the server (routes, modes, ``main``); the
run path is :mod:`tests.support.standin_runs`.

Standard library only: it also runs inside a Docker image (as a module of its own
``tests.support`` there).

    python -m tests.support.runner_standin --port 0 --token T --mode ok

``GET /_standin/requests`` (not in the real Runner) lists the last POSTs it
received, so tests can check what the client sent. ``--port 0`` picks a free
port; the first stdout line is ``listening on URL``.
Modes: ``ok``, ``slow-start`` (each container takes ``--delay`` seconds to start,
inside the run's timeout), ``down-docker`` (health ``ok: false``, runs fail),
``slow`` (every answer waits ``--delay`` seconds), ``error500`` (every POST is a
500), ``error500-timeout`` (every POST is at once a 500 that mentions a timeout),
``garbage`` (every POST answers 200 with invalid JSON), ``old`` (no ``/code/run``
nor ``/run``: a Runner too old), ``no-banner`` (stdout without the banner), ``busy``
(``--workers`` at once, ``--delay`` + ``--start-per-run`` per run in progress to start).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.standin_docker import DOCKER_SOCKET
from tests.support.standin_runs import OUTPUT_CAP, Invalid, Runs

VERSION = "0.1.0"
PROTOCOL = "matrixlab.runner.v1"
MODES = (
    "ok",
    "slow-start",
    "down-docker",
    "slow",
    "error500",
    "error500-timeout",
    "garbage",
    "old",
    "no-banner",
    "busy",
)
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


class Runner(Runs):
    """:class:`.Runs` with the Runner's routes: health, capabilities, the POSTs."""

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
            with self.handler_slot():
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
            return {"upload_id": self.keep_upload(data), "size": len(data)}
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
        path = self.path.split("?", 1)[0]
        if path == "/_standin/requests":
            with self.runner.lock:
                return self._send(200, {"requests": self.runner.requests})
        with self.runner.on_event_loop():
            return self._get(path)

    def _get(self, path: str) -> None:
        runner = self.runner
        if runner.mode == "slow":
            time.sleep(runner.delay)
        if path == "/health":
            return self._send(200, runner.health())
        if path == "/capabilities":
            return self._send(200, runner.capabilities())
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
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        # /run is an async route running blocking code: the loop is its for the whole run.
        with self.runner.on_event_loop(hold=self.path.split("?", 1)[0] == "/run"):
            return self._post(raw)

    def _post(self, raw: bytes) -> None:
        runner = self.runner
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
    parser.add_argument(
        "--workers", type=int, default=16, help="busy mode: requests handled at once"
    )
    parser.add_argument(
        "--start-per-run",
        type=float,
        default=0.35,
        help="busy mode: seconds each run in progress adds to a container's start",
    )
    parser.add_argument(
        "--docker-image",
        default="",
        help="run each step as a real container of this image on the Docker engine",
    )
    parser.add_argument(
        "--require-docker-socket",
        action="store_true",
        help=f"exit at start when {DOCKER_SOCKET} is missing, as the real Runner's preflight",
    )
    args = parser.parse_args(argv)
    if args.require_docker_socket and not os.path.exists(DOCKER_SOCKET):
        print(
            f"RuntimeError: Runner cannot see {DOCKER_SOCKET}. Mount it into the runner "
            f"container:\n  - {DOCKER_SOCKET}:{DOCKER_SOCKET}",
            file=sys.stderr,
            flush=True,
        )
        return 3
    Handler.runner = Runner(
        args.token,
        args.mode,
        args.delay,
        workers=args.workers,
        start_per_run=args.start_per_run,
        docker_image=args.docker_image,
    )
    # uvicorn's backlog, so that many clients at once queue instead of being refused.
    ThreadingHTTPServer.request_queue_size = 2048
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
