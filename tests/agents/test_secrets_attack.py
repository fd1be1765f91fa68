"""Issue #30 item 2: an agent in auto mode names the server's secrets and gets none of them.

The server's environment holds the MatrixLab token, a GitHub token, an AWS key and a
database URL; the administrator lets *people* name the last three. An agent in auto
mode asks for all four through REST ``agent/plan`` and through ``jupyter sandbox mcp``
(against that server and in-process); each face refuses the names, and a snippet that
dumps its whole environment shows none of the values (read from outside, in its output).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from collections.abc import Iterator

import pytest
from mcp.client.session import ClientSession

from gitpilot_jupyter.sandbox.policy import AGENT_ENV_ALLOWLIST_ENV, ENV_ALLOWLIST_ENV
from tests.server.conftest import api, jp_server_config, openapi
from tests.server.helpers import Api
from tests.support.live_server import LiveServer, start_live_server

from .test_mcp import JUPYTER, envelope, run_session, text_of

__all__ = ["api", "jp_server_config", "openapi"]

#: What the issue's agent asked for; the first is the product's own (never passed).
SECRET_NAMES = ("GITPILOT_MATRIXLAB_TOKEN", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL")
#: The names a person may pass on this server; an agent may pass none of them.
PEOPLES_LIST = "GITHUB_TOKEN AWS_SECRET_ACCESS_KEY DATABASE_URL"
DUMP = "import os\nfor k, v in sorted(os.environ.items()):\n    print(k, v)\n"


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Each secret set in the (in-process) server's environment to a value of its own."""
    values = {name: f"{name.lower()}-{secrets.token_hex(8)}" for name in SECRET_NAMES}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def assert_no_secret(output: str, values: dict[str, str]) -> None:
    leaked = [name for name, value in values.items() if value in output]
    assert leaked == [], f"the snippet read {leaked}"


@pytest.mark.parametrize(
    "jp_server_config", [{"env_allowlist": PEOPLES_LIST.split()}], indirect=True
)
async def test_rest_agent_plan_in_auto_mode_gets_none_of_the_servers_secrets(
    api: Api, planted: dict[str, str]
) -> None:
    for name in SECRET_NAMES:
        body = {"language": "python", "code": DUMP, "env": [name], "approve": True}
        answer = await api("POST", "api/sandbox/agent/plan", body)
        assert answer.code == 400, answer.text
        assert "approval_token" not in answer.body
        if name.startswith("GITPILOT_"):
            assert answer.body["code"] == "invalid_env" and "never passed" in answer.body["message"]
        else:
            assert answer.body["code"] == "env_not_allowed", answer.text
            assert "agent_env_allowlist" in answer.body["message"]
    # Planned without names, then run with them added: the approval does not cover it.
    plain = {"language": "python", "code": DUMP}
    planned = await api("POST", "api/sandbox/agent/plan", {**plain, "approve": True})
    assert planned.code == 200 and planned.body["plan"]["env"] == []
    token = planned.body["approval_token"]
    added = {**plain, "env": ["GITHUB_TOKEN"], "approval_token": token}
    refused = await api("POST", "api/sandbox/run", added)
    assert refused.code == 403, refused.text
    ran = await api("POST", "api/sandbox/run", {**plain, "approval_token": token})
    assert ran.code == 200 and ran.body["exit_code"] == 0, ran.text
    assert_no_secret(ran.body["stdout"] + ran.body["stderr"], planted)
    # A person may name a listed one, and the plan says so as a [!!] line.
    person = await api("POST", "api/sandbox/plan", {**plain, "env": ["DATABASE_URL"]})
    assert person.code == 200, person.text
    line = {"label": "passes the server's DATABASE_URL", "ok": False}
    assert line in person.body["plan"]["checks"]


@pytest.fixture(scope="module")
def secret_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real server whose environment holds the secrets; people may name three of them."""
    values = {name: f"{name.lower()}-{secrets.token_hex(8)}" for name in SECRET_NAMES}
    env = {**values, ENV_ALLOWLIST_ENV: PEOPLES_LIST}
    server = start_live_server(tmp_path_factory.mktemp("secret-server"), env=env)
    try:
        yield server
    finally:
        server.stop()


async def agent_asks_for_every_secret(session: ClientSession) -> str:
    """The agent's calls; the output of its environment dump."""
    for tool, args in (
        ("run_command", {"command": "env"}),
        ("run_in_sandbox", {"language": "python", "code": DUMP}),
    ):
        for name in SECRET_NAMES:
            asked = await session.call_tool(tool, {**args, "env": [name]})
            assert asked.is_error, text_of(asked)
            reply = envelope(asked)
            assert reply["status"] == "error" and reply["result"] is None, reply
            assert reply["error_code"] in ("env_not_allowed", "invalid_env"), reply
    dumped = await session.call_tool("run_command", {"command": "env"})
    result = envelope(dumped)["result"]
    assert result is not None and result["exit_code"] == 0, text_of(dumped)
    return str(result["stdout"]) + str(result["stderr"])


def test_mcp_in_auto_mode_against_the_server_gets_none_of_its_secrets(
    secret_server: LiveServer,
) -> None:
    outputs: list[str] = []

    async def scenario(session: ClientSession) -> None:
        outputs.append(await agent_asks_for_every_secret(session))

    server_env = {"GITPILOT_JUPYTER_URL": secret_server.url}
    server_env["GITPILOT_JUPYTER_TOKEN"] = secret_server.token
    run_session(["--approval", "auto"], server_env, scenario)
    planted = {name: secret_server.env[name] for name in SECRET_NAMES}
    assert_no_secret(outputs[0], planted)
    assert "PATH=" in outputs[0]  # the dump ran and was read


def test_mcp_in_process_in_auto_mode_gets_none_of_its_own_secrets() -> None:
    values = {name: f"{name.lower()}-{secrets.token_hex(8)}" for name in SECRET_NAMES}
    outputs: list[str] = []

    async def scenario(session: ClientSession) -> None:
        outputs.append(await agent_asks_for_every_secret(session))

    env = {**values, ENV_ALLOWLIST_ENV: PEOPLES_LIST}
    run_session(["--approval", "auto", "--server", "local"], env, scenario)
    assert_no_secret(outputs[0], values)


def test_mcp_refuses_to_start_with_an_agent_list_holding_a_product_secret() -> None:
    env = {**os.environ, AGENT_ENV_ALLOWLIST_ENV: "GITPILOT_MATRIXLAB_TOKEN"}
    started = subprocess.run(
        [JUPYTER, "sandbox", "mcp", "--approval", "auto", "--server", "local"],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert started.returncode != 0, started.stderr
    assert AGENT_ENV_ALLOWLIST_ENV in started.stderr and "never passed" in started.stderr
