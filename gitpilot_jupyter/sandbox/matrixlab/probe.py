"""Test connection: what a MatrixLab Runner at a URL offers, and a hint for each known failure.

Read-only: ``GET /health``, ``GET /capabilities`` and an empty ``POST /code/run``
(which a Runner refuses with 401 when the token is wrong and with 422 otherwise,
so nothing ever runs). Works with unsaved values; the token never appears in
the report.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlparse, urlunparse

import httpx

from ...tls import tls_context
from .protocol import body_excerpt, health_document, not_a_runner, token_answer

PROBE_TIMEOUT_SEC = 5.0
#: The Runner's usual host port (Docker mapping) and its native / in-container port.
DOCKER_PORT, NATIVE_PORT = 8765, 8000
REQUIRED_ENDPOINTS = ("/code/run", "/run")
START_HINT = (
    "start it: `jupyter sandbox matrixlab start` (with GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE=1), "
    "or `docker start gitpilot-matrixlab`"
)


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
        except httpx.TimeoutException:
            self.fail(f"{self.url} did not answer within {PROBE_TIMEOUT_SEC:g} s", START_HINT)
            return False
        except httpx.HTTPError as exc:
            other = alternate_port_url(self.url)
            if other and await self._runner_answers(other):
                hint = (
                    f"a Runner answers at {other}: set matrixlab_url to {other} (port "
                    f"{DOCKER_PORT} is the usual Docker mapping, {NATIVE_PORT} a native install "
                    "or the port inside the container)"
                )
            else:
                hint = f"nothing answers at {self.url}; {START_HINT}"
            self.fail(f"cannot reach {self.url}: {exc or type(exc).__name__}", hint)
            return False
        self.report["reachable"] = True
        self.report["latency_ms"] = int((time.monotonic() - started) * 1000)
        body = health_document(response)
        if body is None:
            self.fail(
                not_a_runner(self.url, response),
                "something else listens at this URL: check the host and port of matrixlab_url",
            )
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
            self.fail(f"POST /code/run answered {response.status_code}: {body_excerpt(response)}")


async def probe_runner(
    url: str, token: str = "", *, transport: httpx.AsyncBaseTransport | None = None
) -> dict[str, Any]:
    """Test the Runner at ``url`` with ``token``: a report, never an exception for a bad Runner.

    Keys: ``ok``, ``url``, ``reachable``, ``latency_ms``, ``service``, ``version``,
    ``protocol``, ``docker_ok``, ``token`` (accepted / not required / required /
    rejected / not checked), ``code_run``, ``workspace_run``, ``endpoints``,
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
        report = probe.report
    report["ok"] = report["error"] is None
    report["hint"] = report["hints"][0] if report["hints"] else None
    return report


async def check_connection(
    saved_url: str, saved_token: str, *, url: str | None = None, token: str | None = None
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
    report = await probe_runner(target, token)
    report["token_withheld"] = withheld
    if withheld and report["token"] == "required":
        hint = (
            "the saved token is only sent to the saved URL: type the token to test it "
            f"with {target}, or save the URL first"
        )
        report["hints"] = [hint, *report["hints"][1:]]
        report["hint"] = hint
    return report
