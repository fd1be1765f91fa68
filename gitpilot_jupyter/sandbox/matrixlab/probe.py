"""Test connection: what a MatrixLab Runner at a URL offers, and a hint for each known failure.

``GET /health``, ``GET /capabilities``, an empty ``POST /code/run`` (which a Runner
refuses with 401 when the token is wrong and with 422 otherwise), then one real
one-line snippet on the configured image: a Runner can be healthy, take the token
and still fail every run (an image it cannot pull, one without ``python``). A
snippet that ran is remembered for :data:`SNIPPET_OK_TTL_SEC`, so status can ask
often. Works with unsaved values; the token never appears in the report.
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
import time
from typing import Any
from urllib.parse import urlparse, urlunparse

import httpx

from ...tls import tls_context
from ..backend import RunRequest
from ..errors import BackendFailure, BackendUnreachable
from ..languages import canonical_language
from .backend import MatrixLabSandbox
from .protocol import (
    DOCKER_RUN_FAILED_EXIT,
    INTERPRETERS,
    body_excerpt,
    health_document,
    image_language,
    not_a_runner,
    token_answer,
)

PROBE_TIMEOUT_SEC = 5.0
#: The Runner's usual host port (Docker mapping) and its native / in-container port.
DOCKER_PORT, NATIVE_PORT = 8765, 8000
REQUIRED_ENDPOINTS = ("/code/run", "/run")
START_HINT = (
    "start it: `jupyter sandbox matrixlab start` (with GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1), "
    "or `docker start gitpilot-matrixlab`"
)
BUSY_HINT = (
    "the Runner accepted the connection but is slow to answer: it is busy (many runs at "
    "once, or a large file run, which holds Runner 0.1.0 up) or stuck; wait and test "
    "again, and look at its load (`docker stats`) and `docker logs` of the Runner"
)

NOT_HTTP_HINT = (
    "something that does not speak HTTP listens at this host and port (a database, "
    "ssh, another service): check the port of matrixlab_url"
)
#: Seconds :func:`_first_bytes` waits for a listener's first bytes.
FIRST_BYTES_SEC = 2.0


async def _first_bytes(url: str) -> bytes | None:
    """What a plain-HTTP listener at ``url`` sends first to a bare ``GET /health``.

    None when nothing comes within :data:`FIRST_BYTES_SEC` (a busy server), or for an
    https URL. An ssh or database port greets in its own protocol: httpx then waits for
    headers that never come, so its timeout alone would look like a busy Runner.
    """
    parsed = urlparse(url)
    if parsed.scheme != "http" or parsed.hostname is None:
        return None
    host, port = parsed.hostname, parsed.port or 80
    request = b"GET /health HTTP/1.0\r\nHost: " + parsed.netloc.encode() + b"\r\n\r\n"

    async def greet() -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request)
            await writer.drain()
            return await reader.read(16)
        finally:
            writer.close()

    try:
        return await asyncio.wait_for(greet(), FIRST_BYTES_SEC) or None
    except (OSError, asyncio.TimeoutError):
        return None


# -- the snippet -----------------------------------------------------------------------

#: The one-line snippet each language runs, and what it prints.
SNIPPET_OUTPUT = "gitpilot-ok"
SNIPPETS = {
    "python": f"print({SNIPPET_OUTPUT!r})",
    "javascript": f"console.log({SNIPPET_OUTPUT!r})",
    "bash": f"echo {SNIPPET_OUTPUT}",
}
#: Seconds the snippet may take (the Runner adds its container's start).
SNIPPET_TIMEOUT_SEC = 10
#: Seconds a snippet that ran vouches for the same URL, token and image.
SNIPPET_OK_TTL_SEC = 30.0
_snippet_passed: dict[tuple[str, str, str], float] = {}


def _snippet_key(backend: MatrixLabSandbox, image: str) -> tuple[str, str, str]:
    token = hashlib.sha256(backend.token.encode()).hexdigest()
    return backend.url, token, image


async def snippet_problem(backend: MatrixLabSandbox) -> tuple[str, str] | None:
    """``(error, hint)`` when a one-line snippet does not run on ``backend``'s image.

    None when it printed what it should (then kept for :data:`SNIPPET_OK_TTL_SEC`).
    The snippet's language is the one the configured image serves (python when none
    is configured).
    """
    language = canonical_language(image_language(backend.image)) if backend.image else "python"
    image = backend.image_for(language)
    key = _snippet_key(backend, image)
    if time.monotonic() - _snippet_passed.get(key, float("-inf")) < SNIPPET_OK_TTL_SEC:
        return None
    request = RunRequest(
        language=language, code=SNIPPETS[language], timeout_sec=SNIPPET_TIMEOUT_SEC
    )
    what = f"a one-line {language} snippet on the image {image}"
    try:
        result = await backend.run(request)
    except BackendUnreachable as exc:
        return f"{what} got no answer: {exc.message}", BUSY_HINT
    except BackendFailure as exc:
        if "its image has no `" in exc.message:  # the run path's word for our wrapper's 127
            return f"{what} could not run: {exc.message}", _no_interpreter_hint(image, language)
        if f"(exit {DOCKER_RUN_FAILED_EXIT})" in exc.message:
            hint = (
                f"the image {image} is not on the Runner's Docker engine and cannot be pulled: "
                f"`docker pull {image}` (or build it) on the Runner's host, or `jupyter sandbox "
                "matrixlab install`; or clear matrixlab_image to use the Runner's own images"
            )
            return f"the Runner cannot start {what}: {exc.message}", hint
        return f"the Runner failed {what}: {exc.message}", "`docker logs` of the Runner says why"
    if result.timed_out:
        return f"{what} did not finish within {SNIPPET_TIMEOUT_SEC} s", BUSY_HINT
    if result.exit_code == 127:
        hint = _no_interpreter_hint(image, language)
        return f"{what} exited 127: {result.stderr.strip()[:200]}", hint
    if result.exit_code == 126 and "timeout command" in result.stderr:
        hint = f"the image {image} lacks coreutils (`timeout`): use a Debian-based image"
        return f"{what} could not run: {result.stderr.strip()[:200]}", hint
    if result.exit_code != 0 or result.stdout.strip() != SNIPPET_OUTPUT:
        output = (result.stderr or result.stdout).strip()[:200]
        return (
            f"{what} exited {result.exit_code} instead of printing {SNIPPET_OUTPUT}: {output}",
            f"runs on the image {image} fail: check it, or clear matrixlab_image",
        )
    _snippet_passed[key] = time.monotonic()
    return None


def _no_interpreter_hint(image: str, language: str) -> str:
    interpreter = INTERPRETERS[language]
    return (
        f"the image {image} has no `{interpreter}` command"
        + (" (an image with only `python3`?)" if language == "python" else "")
        + f": use an image that has `{interpreter}` on its PATH, or add it (for example "
        "`ln -s /usr/bin/python3 /usr/local/bin/python` in its Dockerfile)"
    )


def _other_scheme(url: str) -> str:
    """The same URL with http:// and https:// swapped."""
    parsed = urlparse(url)
    return urlunparse(parsed._replace(scheme="http" if parsed.scheme == "https" else "https"))


def _is_tls_mismatch(exc: BaseException) -> bool:
    """A TLS handshake that met a plain-HTTP server (or the reverse)."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "SSL" in str(exc) or "WRONG_VERSION_NUMBER" in str(exc)


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def alternate_port_url(url: str) -> str | None:
    """The same URL on the other usual Runner port (8765 <-> 8000), if it uses one."""
    parsed = urlparse(url)
    other = {DOCKER_PORT: NATIVE_PORT, NATIVE_PORT: DOCKER_PORT}.get(parsed.port or 0)
    if other is None or parsed.hostname is None:
        return None
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return urlunparse(parsed._replace(netloc=f"{host}:{other}"))


class _Probe:
    """One Test connection run: fills the report as it goes."""

    def __init__(self, url: str, token: str, client: httpx.AsyncClient) -> None:
        self.url, self.token, self.client = url.rstrip("/"), token, client
        self.report: dict[str, Any] = {
            "ok": False,
            "url": self.url,
            "reachable": False,
            "latency_ms": None,
            "service": None,
            "version": None,
            "protocol": None,
            "docker_ok": None,
            "token": "not checked",
            "code_run": None,
            "workspace_run": None,
            "snippet": "not run",
            "endpoints": None,
            "health": None,
            "error": None,
            "hints": [],
        }

    def fail(self, error: str, hint: str | None = None) -> None:
        if self.report["error"] is None:
            self.report["error"] = error
        if hint:
            self.report["hints"].append(hint)

    async def _runner_answers(self, url: str) -> bool:
        try:
            response = await self.client.get(url + "/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        body = health_document(response)
        return body is not None and body.get("service") == "matrixlab-runner"

    async def health(self) -> bool:
        started = time.monotonic()
        try:
            response = await self.client.get(self.url + "/health")
        except httpx.ConnectTimeout:
            self.fail(
                f"{self.url} did not accept a connection within {PROBE_TIMEOUT_SEC:g} s",
                "nothing accepts connections at this host and port (a firewall, or a host "
                "that is down): check the host of matrixlab_url",
            )
            return False
        except httpx.TimeoutException:
            first = await _first_bytes(self.url)
            hint = BUSY_HINT if first is None or first.startswith(b"HTTP/") else NOT_HTTP_HINT
            self.fail(f"{self.url} did not answer within {PROBE_TIMEOUT_SEC:g} s", hint)
            return False
        except httpx.HTTPError as exc:
            self.fail(f"cannot reach {self.url}: {exc or type(exc).__name__}", await self._why(exc))
            return False
        self.report["reachable"] = True
        self.report["latency_ms"] = int((time.monotonic() - started) * 1000)
        body = health_document(response)
        if body is None:
            other = _other_scheme(self.url)
            if response.status_code == 400 and await self._runner_answers(other):
                hint = f"the Runner speaks {urlparse(other).scheme}: set matrixlab_url to {other}"
            else:
                hint = (
                    "something else listens at this URL: check the host and port of matrixlab_url"
                )
            self.fail(not_a_runner(self.url, response), hint)
            return False
        self.report.update(
            health=body, service=body.get("service"), version=body.get("version"), docker_ok=True
        )
        if body.get("ok") is False:
            self.report["docker_ok"] = False
            self.fail(
                f"the Runner at {self.url} is reachable, but its Docker daemon is unavailable",
                "start Docker on the Runner's host; a Runner in a container needs "
                "-v /var/run/docker.sock:/var/run/docker.sock",
            )
        return True

    async def _why(self, exc: httpx.HTTPError) -> str:
        """The hint for a /health that failed below HTTP."""
        other = alternate_port_url(self.url)
        if other and await self._runner_answers(other):
            return (
                f"a Runner answers at {other}: set matrixlab_url to {other} (port "
                f"{DOCKER_PORT} is the usual Docker mapping, {NATIVE_PORT} a native install "
                "or the port inside the container)"
            )
        scheme = urlparse(self.url).scheme
        other = _other_scheme(self.url)
        if (_is_tls_mismatch(exc) or isinstance(exc, httpx.RemoteProtocolError)) and (
            await self._runner_answers(other)
        ):
            return (
                f"the Runner speaks {urlparse(other).scheme}, not {scheme}: "
                f"set matrixlab_url to {other}"
            )
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
            # It took the connection, then answered no HTTP (or hung up on ours).
            return NOT_HTTP_HINT
        if _is_tls_mismatch(exc):
            return (
                "the TLS handshake failed: if the Runner speaks plain HTTP, use http:// in "
                "matrixlab_url; else check its certificate (SSL_CERT_FILE)"
            )
        return f"nothing answers at {self.url}; {START_HINT}"

    async def capabilities(self) -> None:
        upgrade = "upgrade the Runner image (docker pull ruslanmv/matrixlab-runner:latest)"
        try:
            response = await self.client.get(self.url + "/capabilities")
        except httpx.HTTPError as exc:
            self.fail(f"GET /capabilities failed: {exc or type(exc).__name__}")
            return
        body = _json(response)
        endpoints = body.get("endpoints") if isinstance(body, dict) else None
        if not isinstance(endpoints, list):
            self.fail(f"the Runner at {self.url} does not list its capabilities", upgrade)
            return
        self.report["protocol"] = body.get("protocol")
        self.report["version"] = body.get("version") or self.report["version"]
        self.report["endpoints"] = endpoints
        self.report["code_run"] = "/code/run" in endpoints
        self.report["workspace_run"] = "/run" in endpoints
        missing = [e for e in REQUIRED_ENDPOINTS if e not in endpoints]
        if missing:
            self.fail(f"the Runner does not offer {', '.join(missing)}: it is too old", upgrade)

    async def token_check(self) -> None:
        try:
            response = await token_answer(self.client, self.url, self.token)
        except httpx.HTTPError as exc:
            self.fail(f"POST /code/run failed: {exc or type(exc).__name__}")
            return
        if response.status_code == 401:
            self.report["token"] = "rejected" if self.token else "required"
            hint = (
                "the Runner rejected the token: set matrixlab_token to its MATRIXLAB_BEARER_TOKEN"
                if self.token
                else "the Runner requires a bearer token: set matrixlab_token to its "
                "MATRIXLAB_BEARER_TOKEN"
            )
            self.fail(f"401 from the Runner: {body_excerpt(response)}", hint)
        elif response.status_code == 422:
            self.report["token"] = "accepted" if self.token else "not required"
        else:
            self.fail(*token_check_failure(response))

    async def snippet(self, image: str, transport: httpx.AsyncBaseTransport | None) -> None:
        backend = MatrixLabSandbox(url=self.url, token=self.token, image=image, transport=transport)
        problem = await snippet_problem(backend)
        self.report["snippet"] = "ran" if problem is None else "failed"
        if problem is not None:
            self.fail(*problem)


def token_check_failure(response: httpx.Response) -> tuple[str, str]:
    """``(error, hint)`` for a token check answered neither 401 nor 422."""
    error = (
        f"the token check (an empty POST /code/run) answered {response.status_code}, "
        f"not 401 or 422: {body_excerpt(response)}"
    )
    if response.status_code in (404, 405):
        hint = (
            "nothing serves POST /code/run at this URL: check the path of matrixlab_url "
            "(a proxy in front of the Runner?)"
        )
    elif response.status_code in (403, 407):
        hint = "something in front of the Runner (a proxy?) refuses the request"
    else:
        hint = (
            "the Runner (or a proxy in front of it) fails its protected routes: "
            "`docker logs` of the Runner says why"
        )
    return error, hint


async def probe_runner(
    url: str,
    token: str = "",
    *,
    image: str = "",
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict[str, Any]:
    """Test the Runner at ``url`` with ``token``: a report, never an exception for a bad Runner.

    Keys: ``ok``, ``url``, ``reachable``, ``latency_ms``, ``service``, ``version``,
    ``protocol``, ``docker_ok``, ``token`` (accepted / not required / required /
    rejected / not checked), ``code_run``, ``workspace_run``, ``snippet`` (ran /
    failed / not run: a one-line snippet on ``image``), ``endpoints``,
    ``health`` (the Runner's ``/health`` body), ``error`` (the first failure) and
    ``hints`` (what to do about each failure).
    """
    async with httpx.AsyncClient(
        transport=transport, timeout=PROBE_TIMEOUT_SEC, verify=tls_context()
    ) as client:
        probe = _Probe(url, token, client)
        if await probe.health():
            await probe.capabilities()
            await probe.token_check()
            if probe.report["error"] is None:
                await probe.snippet(image, transport)
        report = probe.report
    report["ok"] = report["error"] is None
    report["hint"] = report["hints"][0] if report["hints"] else None
    return report


async def check_connection(
    saved_url: str,
    saved_token: str,
    *,
    url: str | None = None,
    token: str | None = None,
    image: str = "",
) -> dict[str, Any]:
    """Test connection with unsaved values over saved ones.

    The saved token goes only to the saved URL: testing another URL without typing
    a token sends none, so the write-only token can never be sent to an arbitrary host.
    """
    target = (url or saved_url).rstrip("/")
    withheld = False
    if token is None:
        withheld = bool(saved_token) and target != saved_url.rstrip("/")
        token = "" if withheld else saved_token
    report = await probe_runner(target, token, image=image)
    report["token_withheld"] = withheld
    if withheld and report["token"] == "required":
        hint = (
            "the saved token is only sent to the saved URL: type the token to test it "
            f"with {target}, or save the URL first"
        )
        report["hints"] = [hint, *report["hints"][1:]]
        report["hint"] = hint
    return report
