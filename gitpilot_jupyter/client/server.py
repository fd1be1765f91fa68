"""Finding and calling a running Jupyter server with the sandbox extension.

The one owner of server discovery for every face outside the server: agents and
the CLI and the kernel (:mod:`.resolve`,
:mod:`.rest`). A server is named by ``GITPILOT_JUPYTER_URL`` /
``GITPILOT_JUPYTER_TOKEN`` or found from the ``jpserver-<pid>.json`` runtime
files that running servers write. Transport failures become the core's one
:class:`~.sandbox.errors.ServerUnreachable`; error answers become a
:class:`~.sandbox.errors.SandboxError` with the server's ``code``.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import json
import os
import socket
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..sandbox.errors import SandboxError, ServerUnreachable
from ..sandbox.sync import on_shared_loop, on_shared_loop_close
from ..tls import tls_context

URL_ENV = "GITPILOT_JUPYTER_URL"
TOKEN_ENV = "GITPILOT_JUPYTER_TOKEN"
#: The sandbox REST API under a server's base URL.
API = "api/sandbox"
#: Seconds a probe of ``GET /api/sandbox/status`` may take before the server counts as absent.
PROBE_TIMEOUT = 3.0
#: Seconds a plan / approve / status / config call to a server may take.
REQUEST_TIMEOUT_SEC = 30.0
#: Seconds an install's stream may stay silent (a layer of a large image can take minutes).
INSTALL_READ_TIMEOUT_SEC = 600.0
#: Seconds an idle keep-alive connection to a server is kept (cells come minutes apart).
KEEPALIVE_SEC = 300.0


@dataclass(frozen=True)
class ServerInfo:
    """A Jupyter server: its base URL (ending in ``/``), token, where it was found, its pid."""

    url: str
    token: str
    found_in: str
    pid: int | None = None

    def __post_init__(self) -> None:
        if not self.url.endswith("/"):
            object.__setattr__(self, "url", self.url + "/")


def auth_headers(token: str) -> dict[str, str]:
    """The ``Authorization`` header Jupyter servers accept (none without a token)."""
    return {"Authorization": f"token {token}"} if token else {}


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def default_runtime_dir() -> str:
    """Jupyter's runtime folder (``JUPYTER_RUNTIME_DIR`` or the platform default)."""
    from jupyter_core.paths import jupyter_runtime_dir

    return str(jupyter_runtime_dir())


def runtime_servers(runtime_dirs: Iterable[str] | None = None) -> list[ServerInfo]:
    """Servers whose runtime file names a live process, newest first (files are only read)."""
    found = []
    for runtime_dir in runtime_dirs if runtime_dirs is not None else [default_runtime_dir()]:
        folder = Path(runtime_dir)
        if not folder.is_dir():
            continue
        files = sorted(
            folder.glob("jpserver-*.json"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        for path in files:
            try:
                info = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # being written, or not ours to read
            if isinstance(info, dict) and info.get("url") and _alive(info.get("pid")):
                token = str(info.get("token", ""))
                found.append(ServerInfo(str(info["url"]), token, str(path), info["pid"]))
    return found


def server_answers(url: str, token: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """True when the sandbox extension answers ``GET /api/sandbox/status`` at ``url``."""
    try:
        response = httpx.get(
            url.rstrip("/") + f"/{API}/status", headers=auth_headers(token), timeout=timeout
        )
    except (httpx.HTTPError, httpx.InvalidURL):
        return False
    try:
        data = response.json()
    except ValueError:
        return False
    # A 200 page that is not the extension's status (a proxy, another app) does not count.
    return response.status_code == 200 and isinstance(data, dict) and "backend" in data


def discover_server(
    environ: Mapping[str, str], runtime_dirs: Iterable[str] | None = None
) -> ServerInfo | None:
    """The server from the env vars, else the first running one with the sandbox extension.

    Blocking (it probes servers): async callers run it in a thread.
    """
    url = environ.get(URL_ENV, "").strip()
    if url:
        return ServerInfo(url, environ.get(TOKEN_ENV, ""), URL_ENV)
    for server in runtime_servers(runtime_dirs):
        if server_answers(server.url, server.token):
            return server
    return None


def error_from_answer(response: httpx.Response) -> SandboxError:
    """The typed error for a 4xx/5xx answer: the server's ``message`` and ``code``."""
    try:
        data = response.json()
    except ValueError:
        data = None
    body = data if isinstance(data, dict) else {}
    message = body.get("message")
    if not isinstance(message, str):
        message = f"the Jupyter server answered HTTP {response.status_code}"
    code = body.get("code")
    if not isinstance(code, str):
        code = "not_found" if response.status_code == 404 else "server_error"
    error = SandboxError(message, code=code)
    error.status = response.status_code
    return error


def unreachable(url: str, exc: Exception) -> ServerUnreachable:
    """The error for a server that did not answer (refused, timed out, cut off)."""
    detail = str(exc) or exc.__class__.__name__
    return ServerUnreachable(f"the Jupyter server at {url} does not answer ({detail})")


async def _no_delay(response: httpx.Response) -> None:
    # Small requests on a reused connection would wait for the server's delayed ACK
    # (Nagle): measured 5 ms per run on loopback. A fresh connection does not, hence
    # setting it once the connection is there (the transport, with proxies, stays httpx's).
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _NoCookies(http.cookiejar.CookieJar):
    """A jar that keeps nothing: calls authenticate with the token alone.

    A Jupyter server answers a token with a login cookie; kept, it would go with
    every later request to any server on that host (cookies ignore ports).
    """

    def extract_cookies(self, response: Any, request: Any) -> None:
        return None

    def add_cookie_header(self, request: Any) -> None:
        return None


def new_http_client(timeout: float = REQUEST_TIMEOUT_SEC) -> httpx.AsyncClient:
    """A client for server calls: the shared TLS context, no Nagle delay, no cookies kept."""
    return httpx.AsyncClient(
        timeout=timeout,
        verify=tls_context(),
        cookies=_NoCookies(),
        limits=httpx.Limits(keepalive_expiry=KEEPALIVE_SEC),
        event_hooks={"response": [_no_delay]},
    )


#: The keep-alive client of :func:`~..sandbox.sync.shared_loop` and that loop (only used there).
_kept: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None


async def _close_kept() -> None:
    global _kept
    kept, _kept = _kept, None
    if kept is not None:
        await kept[1].aclose()


@contextlib.asynccontextmanager
async def http_client() -> AsyncIterator[httpx.AsyncClient]:
    """The client for one call: a kept one on the shared loop, else one for this call.

    A kernel's cells run on the shared loop (:func:`~..sandbox.sync.run_sync`), so
    their calls reuse one connection per server (closed at exit); any other loop (the
    CLI's ``asyncio.run`` per command) gets a client closed after the call, since a
    client must not outlive, or be used from another, loop. Give each request its
    own ``timeout=``.
    """
    global _kept
    if on_shared_loop():
        loop = asyncio.get_running_loop()
        # (Another loop's: the shared loop was started again in a forked child.)
        if _kept is None or _kept[0] is not loop or _kept[1].is_closed:
            _kept = (loop, new_http_client())
            on_shared_loop_close(_close_kept)
        yield _kept[1]
        return
    async with new_http_client() as client:
        yield client


async def call_api(
    server: ServerInfo,
    method: str,
    route: str,
    body: Any = None,
    *,
    timeout: float = REQUEST_TIMEOUT_SEC,
) -> Any:
    """One JSON request to ``/api/sandbox/<route>``; the answer's JSON (``None`` if not JSON)."""
    answer = await _answer(server, method, route, body, timeout)
    try:
        return answer.json()
    except ValueError:
        return None


async def fetch_bytes(
    server: ServerInfo, route: str, *, timeout: float = REQUEST_TIMEOUT_SEC
) -> bytes:
    """The body of ``GET /api/sandbox/<route>`` as it came (a run's file)."""
    return (await _answer(server, "GET", route, None, timeout)).content


async def _answer(
    server: ServerInfo, method: str, route: str, body: Any, timeout: float
) -> httpx.Response:
    """One request to ``/api/sandbox/<route>``: its answer, or the typed error it says."""
    try:
        async with http_client() as client:
            answer = await client.request(
                method,
                server.url + f"{API}/{route}",
                json=body,
                headers=auth_headers(server.token),
                timeout=timeout,
            )
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise unreachable(server.url, exc) from None
    if answer.status_code >= 400:
        raise error_from_answer(answer)
    return answer
