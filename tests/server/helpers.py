"""Helpers for the server tests: answers, config, OpenAPI checks, the approval flow."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from traitlets.config import Config

from gitpilot_jupyter.server.schemas import openapi_document

NDJSON = "application/x-ndjson"


@dataclass
class Answer:
    """One HTTP answer: status, parsed body, raw text and headers."""

    code: int
    body: Any
    text: str
    headers: Any


Api = Callable[..., Awaitable[Answer]]


def server_config(**sandbox: Any) -> Config:
    """Server config with the extension on, authentication required, terminals off."""
    return Config(
        {
            "ServerApp": {
                "jpserver_extensions": {"gitpilot_jupyter": True},
                "allow_unauthenticated_access": False,
                "terminals_enabled": False,
            },
            "SandboxApp": sandbox,
        }
    )


def check_against_openapi(openapi: OpenAPI, method: str, path: str, answer: Answer) -> None:
    """Fail when ``answer`` does not match what rest-api.yml promises for this route."""
    content_type = answer.headers.get("Content-Type", "").split(";")[0]
    if content_type == NDJSON:
        return  # stream lines are checked by the streaming tests
    openapi.validate_response(
        MockRequest("http://localhost", method.lower(), path.split("?")[0]),
        MockResponse(answer.text.encode(), status_code=answer.code, content_type=content_type),
    )


def check_stream_line(line: dict[str, Any], result_schema: str) -> None:
    """One NDJSON line matches ``StreamLine``, and the result line ``result_schema`` too."""
    components = openapi_document()["components"]
    names = ["StreamLine"] + ([result_schema] if line["type"] == "result" else [])
    for name in names:
        schema = {"$ref": f"#/components/schemas/{name}", "components": components}
        Draft202012Validator(schema).validate(line)


async def plan_and_approve(api: Api, **plan: Any) -> tuple[dict[str, Any], str]:
    """Plan a snippet and approve it; the plan and its approval token."""
    answer = await api("POST", "api/sandbox/plan", plan)
    assert answer.code == 200, answer.text
    planned = answer.body["plan"]
    approval = await api("POST", "api/sandbox/approve", {"plan_id": planned["plan_id"]})
    assert approval.code == 200, approval.text
    return planned, approval.body["approval_token"]


async def approved_run(api: Api, language: str, code: str, **extra: Any) -> Answer:
    """Plan, approve and run ``code``; the run's answer."""
    _plan, token = await plan_and_approve(api, language=language, code=code, **extra)
    body = {"language": language, "code": code, "approval_token": token, **extra}
    return await api("POST", "api/sandbox/run", body)
