"""A real Jupyter server with the sandbox extension, and a client that checks every answer.

Every response a test receives through ``api`` is validated against the shipped
OpenAPI document, so the handlers are held to ``rest-api.yml`` by the whole suite.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openapi_core import OpenAPI
from traitlets.config import Config

from gitpilot_jupyter.server.schemas import openapi_document
from tests.support.audit import AuditEvents, listen_to_audit

from .helpers import NDJSON, Answer, Api, check_against_openapi, server_config


@pytest.fixture(scope="session")
def openapi() -> OpenAPI:
    """The shipped OpenAPI document, ready to validate responses."""
    return OpenAPI.from_dict(openapi_document())


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest) -> Config:
    """The extension on an authenticated server.

    An ``indirect`` param sets SandboxApp traits (a dict) or adds any config (a ``Config``).
    """
    param = getattr(request, "param", {})
    if isinstance(param, Config):
        config = server_config()
        config.merge(param)
        return config
    return server_config(**param)


@pytest.fixture
def api(jp_fetch: Any, openapi: OpenAPI) -> Api:
    """``await api(method, path, body=..., headers=..., raw=...)`` -> :class:`Answer`.

    Never raises on an HTTP error status; validates each answer against the OpenAPI document.
    """

    async def call(
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        validate: bool = True,
    ) -> Answer:
        kwargs: dict[str, Any] = {"method": method, "raise_error": False}
        if method in ("POST", "PUT"):
            kwargs["body"] = raw if raw is not None else json.dumps({} if body is None else body)
        response = await jp_fetch(
            *path.strip("/").split("/"), headers=headers or {}, params=params, **kwargs
        )
        text = response.body.decode("utf-8") if response.body else ""
        parsed: Any = None
        if text and "json" in response.headers.get("Content-Type", ""):
            parsed = (
                json.loads(text)
                if NDJSON not in response.headers["Content-Type"]
                else [json.loads(line) for line in text.splitlines()]
            )
        answer = Answer(response.code, parsed, text, response.headers)
        if validate:
            check_against_openapi(openapi, method, "/" + path.strip("/"), answer)
        return answer

    return call


@pytest.fixture
def client(
    http_server_client: Any, jp_http_port: int, jp_base_url: str, jp_auth_header: dict[str, str]
) -> httpx.AsyncClient:
    """A real HTTP client on the test server (``http_server_client`` makes it listen)."""
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{jp_http_port}{jp_base_url}",
        headers=jp_auth_header,
        timeout=60,
    )


@pytest.fixture
def events(jp_serverapp: Any) -> AuditEvents:
    """Every sandbox audit event the server emits, as (kind, data)."""
    return listen_to_audit(jp_serverapp)
