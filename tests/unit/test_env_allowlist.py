"""The env pass-through rule: the administrator's allowlists, and secrets no list can pass."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.errors import InvalidRequest, InvalidSetting
from gitpilot_jupyter.sandbox.policy import (
    AGENT_ENV_ALLOWLIST_ENV,
    ENV_ALLOWLIST_ENV,
    ENV_PASSTHROUGH_ENV,
    SandboxPolicy,
    never_passed,
)
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.sync import run_sync

#: The product's own secrets and the Jupyter and hub tokens, by the names a server meets.
PRODUCT_SECRETS = (
    "GITPILOT_MATRIXLAB_TOKEN",
    "GITPILOT_JUPYTER_TOKEN",
    "GITPILOT_JUPYTER_URL",
    "MATRIXLAB_BEARER_TOKEN",
    "JUPYTER_TOKEN",
    "JUPYTERHUB_API_TOKEN",
    "JPY_API_TOKEN",
    "JUPYTERHUB_OAUTH_CLIENT_SECRET",
)


def test_product_secrets_are_never_passed_but_other_names_may_be() -> None:
    assert [n for n in PRODUCT_SECRETS if not never_passed(n)] == []
    for name in ("GITHUB_TOKEN", "DATABASE_URL", "JUPYTERHUB_USER", "LANG", "MY_GITPILOT_X"):
        assert not never_passed(name), name


def test_a_caller_names_only_what_the_administrator_listed() -> None:
    policy = SandboxPolicy(allowed_vars=frozenset(), caller_vars=frozenset({"DATABASE_URL"}))
    assert policy.caller_env(["DATABASE_URL", "DATABASE_URL"]) == ("DATABASE_URL",)
    with pytest.raises(InvalidRequest) as info:
        policy.caller_env(["DATABASE_URL", "GITHUB_TOKEN"])
    assert info.value.code == "env_not_allowed" and info.value.status == 400
    message = info.value.message
    assert "GITHUB_TOKEN may not be passed" in message and "now: DATABASE_URL" in message
    assert "c.SandboxApp.env_allowlist" in message and ENV_ALLOWLIST_ENV in message
    # The people's list is not the agents': an agent gets none unless listed for agents.
    with pytest.raises(InvalidRequest) as agent:
        policy.caller_env(["DATABASE_URL"], agent=True)
    assert "an agent may name" in agent.value.message and "now: none" in agent.value.message
    assert AGENT_ENV_ALLOWLIST_ENV in agent.value.message
    both = dataclasses.replace(policy, agent_vars=frozenset({"DATABASE_URL"}))
    assert both.caller_env(["DATABASE_URL"], agent=True) == ("DATABASE_URL",)


def test_by_default_nobody_may_name_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_PASSTHROUGH_ENV, ENV_ALLOWLIST_ENV, AGENT_ENV_ALLOWLIST_ENV):
        monkeypatch.delenv(name, raising=False)
    policy = SandboxPolicy()
    assert policy.allowed_vars == policy.caller_vars == policy.agent_vars == frozenset()
    for agent in (False, True):
        with pytest.raises(InvalidRequest, match="now: none"):
            policy.caller_env(["HOME"], agent=agent)
    assert policy.caller_env([]) == ()


@pytest.mark.parametrize("setting", ["allowed_vars", "caller_vars", "agent_vars"])
def test_a_list_naming_a_product_secret_is_refused(setting: str) -> None:
    with pytest.raises(InvalidSetting) as info:
        SandboxPolicy(**{setting: frozenset({"LANG", "GITPILOT_MATRIXLAB_TOKEN"})})  # type: ignore[arg-type]
    assert "GITPILOT_MATRIXLAB_TOKEN" in info.value.message and "remove it" in info.value.message


@pytest.mark.parametrize("variable", [ENV_ALLOWLIST_ENV, AGENT_ENV_ALLOWLIST_ENV])
def test_an_environment_list_naming_a_token_is_refused(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, "LANG, JUPYTER_TOKEN")
    with pytest.raises(InvalidSetting) as info:
        SandboxPolicy()
    assert variable in info.value.message and "approve its own plans" in info.value.message
    monkeypatch.setenv(variable, "LANG not-a-name")
    with pytest.raises(InvalidSetting, match="'not-a-name' is not a variable name"):
        SandboxPolicy()


def test_a_product_secret_never_reaches_a_run_whatever_asks() -> None:
    policy = SandboxPolicy(allowed_vars=frozenset())
    environ = dict.fromkeys(PRODUCT_SECRETS, "s3cret") | {"PATH": "/bin", "OK": "y"}
    scrubbed = policy.scrub_env(environ, allow_network=True, passthrough=[*PRODUCT_SECRETS, "OK"])
    assert scrubbed == {"PATH": "/bin", "OK": "y"}
    with pytest.raises(InvalidRequest) as info:
        policy.caller_env(["GITPILOT_MATRIXLAB_TOKEN"])
    assert info.value.code == "invalid_env" and "never passed" in info.value.message


def test_the_plan_shows_each_passed_name_as_a_failed_check(
    sandbox_config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgres://x")
    monkeypatch.setenv("SITE_NAME", "course")
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    service = SandboxService(
        policy=SandboxPolicy(
            allowed_vars=frozenset({"SITE_NAME"}),
            caller_vars=frozenset({"DATABASE_URL", "NOT_SET_HERE"}),
        )
    )
    options = RunOptions(language="python", code="1", env=["DATABASE_URL", "NOT_SET_HERE"])
    checks = run_sync(service.plan(options)).checks
    assert {
        "label": "passes the server's DATABASE_URL, NOT_SET_HERE (not set on the server: "
        "NOT_SET_HERE)",
        "ok": False,
    } in checks
    every_run = "passes the server's SITE_NAME (the administrator's, to every run)"
    assert {"label": every_run, "ok": False} in checks
    plain = run_sync(service.plan(RunOptions(language="python", code="1"))).checks
    assert [c["label"] for c in plain if "passes the server's" in c["label"]] == [every_run]
