"""Authentication and authorization on every route, in the style of jupyter_server_terminals."""

from __future__ import annotations

import json
from typing import Any, ClassVar

import pytest
from jupyter_server.auth.authorizer import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
from traitlets.config import Config

from gitpilot_jupyter.server.schemas import openapi_document

from .helpers import Api, server_config

#: Every route: (method, path, body, the action the authorizer must be asked for).
ROUTES = [
    ("GET", "api/sandbox/status", None, "read"),
    ("GET", "api/sandbox/config", None, "read"),
    ("PUT", "api/sandbox/config", {"timeout_sec": 30}, "write"),
    ("POST", "api/sandbox/plan", {"language": "python", "code": "print(1)"}, "execute"),
    ("GET", "api/sandbox/plans", None, "read"),
    ("POST", "api/sandbox/approve", {"plan_id": "plan_0000000000000000"}, "execute"),
    ("POST", "api/sandbox/run", {"language": "python", "code": "print(1)"}, "execute"),
    ("POST", "api/sandbox/plan-and-run", {"language": "python", "code": "print(1)"}, "execute"),
    ("DELETE", "api/sandbox/runs/{run_id}", None, "execute"),
    ("GET", "api/sandbox/runs/{run_id}/files/{name}", None, "read"),
    ("GET", "api/sandbox/sessions", None, "read"),
    # A name the schema refuses: the allowed case answers 400, no kernel is started.
    ("POST", "api/sandbox/sessions", {"name": "!"}, "execute"),
    ("DELETE", "api/sandbox/sessions/{name}", None, "execute"),
    ("POST", "api/sandbox/sessions/{name}/restart", {}, "execute"),
    ("POST", "api/sandbox/sessions/{name}/interrupt", {}, "execute"),
    ("POST", "api/sandbox/matrixlab/test", {}, "execute"),
    ("GET", "api/sandbox/matrixlab/lifecycle", None, "read"),
    ("POST", "api/sandbox/matrixlab/install", {}, "execute"),
    ("POST", "api/sandbox/matrixlab/start", {}, "execute"),
    ("POST", "api/sandbox/matrixlab/stop", {}, "execute"),
    ("POST", "api/sandbox/agent/plan", {"language": "python", "code": "1"}, "execute"),
    ("POST", "api/sandbox/agent/claim", {"plan_id": "plan_0", "claim": "x"}, "execute"),
    ("POST", "api/sandbox/reject", {"plan_id": "plan_0000000000000000"}, "execute"),
    ("POST", "api/sandbox/batch/plan", {"items": [{"id": 1, "code": "1"}]}, "execute"),
    ("POST", "api/sandbox/batch/approve", {"batch_id": "batch_0000000000000000"}, "execute"),
    ("POST", "api/sandbox/batch", {"batch_id": "batch_0000000000000000"}, "execute"),
]


def test_the_matrix_covers_every_documented_operation() -> None:
    documented = {
        (method.upper(), path.lstrip("/"))
        for path, item in openapi_document()["paths"].items()
        for method in item
        if method in ("get", "put", "post", "delete", "patch")
    }
    assert {(method, path) for method, path, _, _ in ROUTES} == documented


class RecordingAuthorizer(Authorizer):
    """Allows what ``permissions`` lists and records every question it is asked."""

    permissions: ClassVar[dict[str, list[str]]] = {}
    asked: ClassVar[list[tuple[str, str]]] = []

    def is_authorized(self, handler: Any, user: Any, action: str, resource: str) -> bool:
        self.asked.append((action, resource))
        return action in self.permissions.get("actions", []) and resource in self.permissions.get(
            "resources", []
        )


class HeaderIdentityProvider(IdentityProvider):
    """Real, stable users named by an ``X-Test-User`` header (as a hub would provide)."""

    def get_user(self, handler: Any) -> User | None:
        name = handler.request.headers.get("X-Test-User")
        return User(username=name) if name else None


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest) -> Config:
    config = server_config()
    if getattr(request, "param", None) == "users":
        config.ServerApp.identity_provider_class = HeaderIdentityProvider
    else:
        config.ServerApp.authorizer_class = RecordingAuthorizer
    return config


@pytest.mark.parametrize(("method", "path", "body", "action"), ROUTES)
@pytest.mark.parametrize("allowed", [True, False])
async def test_authorization_matrix(
    api: Api, method: str, path: str, body: Any, action: str, allowed: bool
) -> None:
    actions = [action] if allowed else [a for a in ("read", "write", "execute") if a != action]
    RecordingAuthorizer.permissions = {"actions": actions, "resources": ["sandbox"]}
    RecordingAuthorizer.asked.clear()
    answer = await api(method, path, body)
    assert (action, "sandbox") in RecordingAuthorizer.asked
    if allowed:
        # Whatever the route answers (a 404 plan, a 503 Runner...), it is not an authz refusal.
        assert answer.code < 500 or answer.body["code"] != "internal_error"
        assert answer.body is not None and answer.body.get("code") != "forbidden", answer.text
    else:
        assert (answer.code, answer.body["code"]) == (403, "forbidden")
        assert "not authorized" in answer.body["message"]


@pytest.mark.parametrize(("method", "path", "body", "action"), ROUTES)
async def test_unauthenticated_requests_are_refused(
    api: Api, method: str, path: str, body: Any, action: str
) -> None:
    RecordingAuthorizer.permissions = {"actions": ["read", "write", "execute"], "resources": []}
    answer = await api(method, path, body, headers={"Authorization": ""})
    assert answer.code == 403
    assert answer.body["code"] == "forbidden"


async def test_unauthenticated_run_never_runs(api: Api, tmp_path: Any) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('x')"
    body = {"language": "python", "code": code}
    answer = await api("POST", "api/sandbox/run", body, headers={"Authorization": ""})
    assert answer.code == 403 and not marker.exists()


#: A well-formed tornado XSRF token; cookie and header must carry the same one.
XSRF = "2|deadbeef|cafe0123|1700000000"


def login_cookies(set_cookie_headers: list[str]) -> str:
    """The ``Cookie`` header a browser would send back."""
    return "; ".join(header.split(";", 1)[0] for header in set_cookie_headers)


async def test_cookie_authenticated_writes_need_xsrf(api: Api) -> None:
    RecordingAuthorizer.permissions = {
        "actions": ["read", "write", "execute"],
        "resources": ["sandbox"],
    }
    first = await api("GET", "api/sandbox/status")
    cookies = login_cookies(first.headers.get_list("Set-Cookie"))
    assert cookies, "a token login sets the login cookie"
    browser = {"Authorization": "", "Cookie": cookies}
    assert (await api("GET", "api/sandbox/config", headers=browser)).code == 200

    body = {"language": "python", "code": "print(1)"}
    refused = await api("POST", "api/sandbox/plan", body, headers=browser)
    assert (refused.code, refused.body["code"]) == (403, "forbidden")
    assert "xsrf" in refused.body["message"].lower()
    refused = await api("PUT", "api/sandbox/config", {"timeout_sec": 9}, headers=browser)
    assert refused.code == 403

    with_xsrf = {**browser, "Cookie": f"{cookies}; _xsrf={XSRF}", "X-XSRFToken": XSRF}
    accepted = await api("POST", "api/sandbox/plan", body, headers=with_xsrf)
    assert accepted.code == 200, accepted.text


@pytest.mark.parametrize("jp_server_config", ["users"], indirect=True)
async def test_approval_is_bound_to_the_approving_user(api: Api, jp_serverapp: Any) -> None:
    xsrf = {"Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF}
    alice, bob = {"X-Test-User": "alice", **xsrf}, {"X-Test-User": "bob", **xsrf}
    snippet = {"language": "python", "code": "print(1)"}
    plan = await api("POST", "api/sandbox/plan", snippet, headers=alice)
    plan_id = plan.body["plan"]["plan_id"]
    approval = await api("POST", "api/sandbox/approve", {"plan_id": plan_id}, headers=alice)
    run = {**snippet, "approval_token": approval.body["approval_token"]}
    stolen = await api("POST", "api/sandbox/run", run, headers=bob)
    assert (stolen.code, stolen.body["code"]) == (403, "approval_session")
    own = await api("POST", "api/sandbox/run", run, headers=alice)
    assert own.code == 200 and own.body["stdout"] == "1\n"
    assert json.dumps(own.body).count("alice") == 0  # the envelope names no user
