"""The reliability suite's server: a real ``jupyter server`` process holding planted secrets.

Every response a test receives through ``live.http`` is recorded; when the
module's server stops, the recorded responses, the server's log and its audit
events (jupyter_events, written to a file) are searched for every planted
secret. A single hit fails the module.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.live_server import LiveServer, start_live_server
from tests.support.standin_fixture import (  # noqa: F401 - fixtures for the fault tests
    runner_standin,
    start_standin,
)

#: The MatrixLab token is given by env; the saved one is planted by tests through PUT /config.
MATRIXLAB_TOKEN = "mlx-env-" + secrets.token_hex(16)
SAVED_TOKEN = "mlx-saved-" + secrets.token_hex(16)
#: Secrets in the server's environment that no sandboxed process may see.
ENV_SECRETS = {
    "OPENAI_API_KEY": "sk-" + secrets.token_hex(20),
    "GITHUB_TOKEN": "ghp_" + secrets.token_hex(18),
    "DEPLOY_PASSWORD": "pw-" + secrets.token_hex(12),
    "AZURE_CLIENT_CREDENTIAL": "cred-" + secrets.token_hex(12),
}


@dataclass
class Live:
    """A running server, a recording client on it, and the secrets it holds."""

    server: LiveServer
    http: httpx.Client
    audit_path: Path
    responses: list[str] = field(default_factory=list)

    @property
    def secrets(self) -> dict[str, str]:
        """Name -> value of every planted secret."""
        return {
            "GITPILOT_MATRIXLAB_TOKEN": MATRIXLAB_TOKEN,
            "saved matrixlab_token": SAVED_TOKEN,
            **ENV_SECRETS,
        }

    def record(self, response: httpx.Response) -> None:
        """Keep a response's headers and body for the secret sweep."""
        response.read()
        self.responses.append(str(response.headers) + "\n" + response.text)

    def audit_events(self) -> str:
        """Every audit event the server emitted so far (JSON lines)."""
        return self.audit_path.read_text(encoding="utf-8") if self.audit_path.exists() else ""

    def leaks(self) -> list[str]:
        """Where a planted secret appears: responses, server log, audit events."""
        places = {
            "a response": "\n".join(self.responses),
            "the server log": self.server.log(),
            "an audit event": self.audit_events(),
        }
        return [
            f"{name} in {where}"
            for name, value in self.secrets.items()
            for where, text in places.items()
            if value in text
        ]

    def run(self, language: str, code: str, **extra: Any) -> httpx.Response:
        """Plan, approve and run through the REST API; the run's response."""
        plan = self.http.post(
            "/api/sandbox/plan", json={"language": language, "code": code, **extra}
        )
        assert plan.status_code == 200, plan.text
        approval = self.http.post(
            "/api/sandbox/approve", json={"plan_id": plan.json()["plan"]["plan_id"]}
        )
        assert approval.status_code == 200, approval.text
        token = approval.json()["approval_token"]
        body = {"language": language, "code": code, "approval_token": token, **extra}
        return self.http.post("/api/sandbox/run", json=body)


def start_live(workdir: Path, env: dict[str, str] | None = None, args: Sequence[str] = ()) -> Live:
    """Start a server that writes its audit events to ``workdir/audit.jsonl``
    (``args``: more server options)."""
    audit_path = workdir / "audit.jsonl"
    config = workdir / "jupyter-config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.py").write_text(
        f"import logging\nc.EventLogger.handlers = [logging.FileHandler({str(audit_path)!r})]\n",
        encoding="utf-8",
    )
    server = start_live_server(
        workdir,
        env={
            "GITPILOT_MATRIXLAB_TOKEN": MATRIXLAB_TOKEN,
            "TMPDIR": str(_private_tmp(workdir)),
            # Its administrator allows off: test_timeouts holds off runs to theirs too.
            "GITPILOT_SANDBOX_ALLOWED_BACKENDS": "subprocess,matrixlab,off",
            **ENV_SECRETS,
            **(env or {}),
        },
        args=args,
    )
    live = Live(server=server, http=server.client(), audit_path=audit_path)
    live.http.event_hooks["response"].append(live.record)
    return live


def _private_tmp(workdir: Path) -> Path:
    """The server's own TMPDIR, so the suite can count what runs leave behind."""
    folder = workdir / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def stop_and_sweep(live: Live) -> None:
    """Stop the server, then fail if any planted secret was ever shown."""
    # A canary plan: its audit event must be captured, or the sweep of audit events is blind.
    canary = live.http.post("/api/sandbox/plan", json={"language": "bash", "code": "true"})
    live.http.close()
    live.server.stop()
    if canary.status_code == 200 and canary.json()["plan"]["plan_id"] not in live.audit_events():
        pytest.fail("the audit events were not captured: the secret sweep would be blind", False)
    found = live.leaks()
    if found:
        pytest.fail("secrets leaked: " + "; ".join(found), pytrace=False)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    """One real server per test module, swept for secrets when it stops."""
    instance = start_live(tmp_path_factory.mktemp("live"))
    yield instance
    stop_and_sweep(instance)
