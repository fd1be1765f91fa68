"""Security: authentication, cross-site requests, approval tokens, secrets.

Runs against a real server process holding planted secrets (see conftest); when
the module ends, every response, log line and audit event is searched for them.
"""

from __future__ import annotations

import dataclasses
import json
import re
import secrets
import shutil

import httpx
import pytest

from gitpilot_jupyter.server.schemas import openapi_document
from tests.support.system import require_system

from .conftest import ENV_SECRETS, MATRIXLAB_TOKEN, SAVED_TOKEN, Live

#: A body that would do something if a request got through.
_BODIES = {
    "/api/sandbox/config": {"timeout_sec": 7},
    "/api/sandbox/plan": {"language": "python", "code": "print('planned')"},
    "/api/sandbox/run": {"language": "python", "code": "print('ran')", "approval_token": "x" * 43},
    "/api/sandbox/plan-and-run": {"language": "python", "code": "print('ran')", "confirm": True},
}


def _endpoints() -> list[tuple[str, str]]:
    doc = openapi_document()
    return [
        (method.upper(), path)
        for path, item in doc["paths"].items()
        for method in item
        if method in ("get", "put", "post")
    ]


def _count_runs(live: Live) -> int:
    return sum('"run"' in line or "/run/" in line for line in live.audit_events().splitlines())


@pytest.mark.parametrize("credentials", ["none", "wrong token"])
def test_every_endpoint_refuses_unauthenticated_requests(live: Live, credentials: str) -> None:
    endpoints = _endpoints()
    assert len(endpoints) >= 12, endpoints
    runs_before = _count_runs(live)
    headers = {} if credentials == "none" else {"Authorization": "token " + "0" * 48}
    with httpx.Client(base_url=live.server.url, headers=headers, timeout=30) as anonymous:
        for method, path in endpoints:
            answer = anonymous.request(method, path, json=_BODIES.get(path, {}))
            live.record(answer)
            assert answer.status_code == 403, (method, path, answer.status_code, answer.text)
            assert answer.headers["Content-Type"].startswith("application/json"), answer.headers
            assert "Traceback" not in answer.text
    assert _count_runs(live) == runs_before
    # Nothing changed either: the refused PUT did not reach the settings.
    assert live.http.get("/api/sandbox/config").json()["timeout_sec"] != 7


def _cookie_client(live: Live) -> httpx.Client:
    """A browser-like client logged in with a cookie (no token header)."""
    browser = httpx.Client(base_url=live.server.url, timeout=30, follow_redirects=False)
    browser.get("/login")
    xsrf = browser.cookies.get("_xsrf")
    assert xsrf, "the login page sets the _xsrf cookie"
    login = browser.post("/login", data={"password": live.server.token, "_xsrf": xsrf})
    assert login.status_code in (302, 303), login.text
    return browser


def test_cross_site_writes_need_the_xsrf_token(live: Live) -> None:
    browser = _cookie_client(live)
    try:
        assert browser.get("/api/sandbox/status").status_code == 200  # the cookie logs in
        pending = len(live.http.get("/api/sandbox/plans").json()["plans"])
        body = {"language": "python", "code": "print('cross-site')"}
        for path in ("/api/sandbox/plan", "/api/sandbox/run"):
            # A form on another site: the cookie goes along, the XSRF token cannot.
            forged = browser.post(path, json=body)
            live.record(forged)
            assert forged.status_code == 403, (path, forged.text)
            # With its Origin, jupyter_server refuses it before any handler (404).
            foreign = browser.post(path, json=body, headers={"Origin": "http://evil.example"})
            live.record(foreign)
            assert foreign.status_code in (403, 404), (path, foreign.text)
        # Every writing endpoint of the document refuses it, for the XSRF reason itself.
        for method, path in _endpoints():
            if method == "GET":
                continue
            forged = browser.request(method, path, json=_BODIES.get(path, {}))
            live.record(forged)
            assert forged.status_code == 403, (method, path, forged.text)
            assert "xsrf" in forged.json()["message"].lower(), (method, path, forged.text)
        assert live.http.get("/api/sandbox/config").json()["timeout_sec"] != 7
        assert len(live.http.get("/api/sandbox/plans").json()["plans"]) == pending
        # The same request from the page itself (XSRF header = cookie) is accepted.
        same_site = browser.post(
            "/api/sandbox/plan", json=body, headers={"X-XSRFToken": browser.cookies["_xsrf"]}
        )
        live.record(same_site)
        assert same_site.status_code == 200, same_site.text
    finally:
        browser.close()


def test_no_cors_for_other_origins(live: Live) -> None:
    # A browser's preflight carries no credentials.
    with httpx.Client(base_url=live.server.url, timeout=30) as browser:
        answer = browser.options(
            "/api/sandbox/run",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
    allowed = answer.headers.get("Access-Control-Allow-Origin", "")
    assert allowed not in ("*", "http://evil.example"), answer.headers


def _approve(live: Live, code: str, **plan: object) -> str:
    planned = live.http.post("/api/sandbox/plan", json={"language": "python", "code": code, **plan})
    assert planned.status_code == 200, planned.text
    approval = live.http.post(
        "/api/sandbox/approve",
        json={"plan_id": planned.json()["plan"]["plan_id"], **plan},
    )
    assert approval.status_code == 200, approval.text
    token: str = approval.json()["approval_token"]
    return token


def _run(live: Live, code: str, token: str, **extra: object) -> httpx.Response:
    body = {"language": "python", "code": code, "approval_token": token, **extra}
    return live.http.post("/api/sandbox/run", json=body)


def test_approval_tokens_are_long_random_and_distinct(live: Live) -> None:
    tokens = [_approve(live, f"print({i})") for i in range(100)]
    assert len(set(tokens)) == len(tokens)
    for token in tokens:
        assert len(token) >= 43 and re.fullmatch(r"[A-Za-z0-9_-]+", token), token
    # No shared prefix or suffix a guesser could use.
    assert len({t[:6] for t in tokens}) > 90 and len({t[-6:] for t in tokens}) > 90


def test_a_guessed_token_runs_nothing(live: Live) -> None:
    code = "print('guessed')"
    _approve(live, code)  # a real approval for this very code exists
    for _ in range(20):
        answer = _run(live, code, secrets.token_urlsafe(32))
        assert answer.status_code == 403, answer.text
        assert answer.json()["code"] == "approval_unknown"
    assert _run(live, code, "").status_code in (400, 403)


def test_a_token_cannot_be_replayed(live: Live) -> None:
    code = "print('once')"
    token = _approve(live, code)
    first = _run(live, code, token)
    assert first.status_code == 200 and first.json()["stdout"] == "once\n", first.text
    again = _run(live, code, token)
    assert again.status_code == 403 and again.json()["code"] == "approval_used", again.text


@pytest.mark.parametrize(
    "change",
    [
        {"code": "print('other code')"},
        {"language": "bash", "code": "echo moved"},
        {"stdin": "smuggled"},
        {"timeout_sec": 5},
    ],
    ids=["code", "language", "stdin", "timeout"],
)
def test_a_token_cannot_move_to_other_code(live: Live, change: dict[str, object]) -> None:
    code = "print('approved')"
    token = _approve(live, code)
    body = {"language": "python", "code": code, "approval_token": token, **change}
    moved = live.http.post("/api/sandbox/run", json=body)
    assert moved.status_code == 403, moved.text
    assert moved.json()["code"] == "approval_mismatch"
    # The token was not spent: the approved code still runs with it.
    ok = _run(live, code, token)
    assert ok.status_code == 200 and ok.json()["stdout"] == "approved\n", ok.text


def test_a_token_cannot_move_to_another_session(live: Live) -> None:
    code = "print('session')"
    token = _approve(live, code, session_id="session-a")
    other = _run(live, code, token, session_id="session-b")
    assert other.status_code == 403 and other.json()["code"] == "approval_session", other.text
    none = _run(live, code, token)
    assert none.status_code == 403 and none.json()["code"] == "approval_session", none.text
    mine = _run(live, code, token, session_id="session-a")
    assert mine.status_code == 200, mine.text


def test_snippets_never_see_the_servers_secrets(live: Live) -> None:
    python = live.run("python", "import os, json\nprint(json.dumps(dict(os.environ)))")
    bash = live.run("bash", "env; set")
    for answer in (python, bash):
        assert answer.status_code == 200 and answer.json()["exit_code"] == 0, answer.text
        for value in [MATRIXLAB_TOKEN, *ENV_SECRETS.values()]:
            assert value not in answer.text
    seen = json.loads(python.json()["stdout"])
    assert not set(seen) & {"OPENAI_API_KEY", "GITHUB_TOKEN", "GITPILOT_MATRIXLAB_TOKEN"}


def test_the_saved_token_is_write_only(live: Live) -> None:
    put = live.http.put("/api/sandbox/config", json={"matrixlab_token": SAVED_TOKEN})
    assert put.status_code == 200, put.text
    for path in ("/api/sandbox/config", "/api/sandbox/status", "/api/sandbox/matrixlab/lifecycle"):
        answer = live.http.get(path)
        assert answer.status_code == 200, answer.text
        assert SAVED_TOKEN not in answer.text and MATRIXLAB_TOKEN not in answer.text
    assert live.http.get("/api/sandbox/config").json()["has_token"] is True
    # Only what the user saved reaches the disk, never the env token.
    saved = (live.server.config_dir / "settings.json").read_text()
    assert SAVED_TOKEN in saved and MATRIXLAB_TOKEN not in saved


def test_snippets_cannot_read_the_settings_file(live: Live) -> None:
    require_system("bwrap", shutil.which("bwrap") is not None, "hides credential folders")
    live.http.put("/api/sandbox/config", json={"matrixlab_token": SAVED_TOKEN})
    path = live.server.config_dir / "settings.json"
    answer = live.run("bash", f"cat {path} || true; ls -la {path.parent} || true")
    assert answer.status_code == 200, answer.text
    assert SAVED_TOKEN not in answer.text


def test_a_runner_error_does_not_echo_the_token(live: Live, start_standin: object) -> None:
    runner = start_standin(mode="ok", token="the-runner-wants-another-token")  # type: ignore[operator]
    live.http.put("/api/sandbox/config", json={"matrixlab_url": runner.url})
    try:
        for path, body in (
            ("/api/sandbox/matrixlab/test", {}),
            (
                "/api/sandbox/plan",
                {"language": "python", "code": "print(1)", "backend": "matrixlab"},
            ),
        ):
            answer = live.http.post(path, json=body)
            assert MATRIXLAB_TOKEN not in answer.text
        answer = live.run("python", "print(1)", backend="matrixlab")
        assert answer.status_code in (502, 503), answer.text
        assert MATRIXLAB_TOKEN not in answer.text and "401" in answer.text
    finally:
        live.http.put("/api/sandbox/config", json={"matrixlab_url": "http://localhost:8765"})


def test_the_secret_sweep_sees_a_leak(live: Live) -> None:
    # The sweep at the end of each module is only worth something if it can fail.
    leaky = dataclasses.replace(live, responses=[f"oops {MATRIXLAB_TOKEN}"])
    assert leaky.leaks() == ["GITPILOT_MATRIXLAB_TOKEN in a response"]
    assert live.leaks() == []
