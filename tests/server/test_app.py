"""SandboxApp: installed and enabled, and what an administrator configures takes effect."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from traitlets import TraitError

from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.server.app import SandboxApp
from gitpilot_jupyter.server.base import SERVICE_KEY

from .helpers import Api, approved_run, plan_and_approve, server_config


class TaggedService(SandboxService):
    """A service subclass an administrator could configure."""


@pytest.fixture
def settings_dir(tmp_path: Path) -> Path:
    """A settings folder set by the administrator, not by the environment."""
    return tmp_path / "admin-settings"


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest, settings_dir: Path) -> Any:
    """Like the suite's, and ``settings_dir: True`` points at :func:`settings_dir`."""
    traits = dict(getattr(request, "param", {}))
    if traits.pop("settings_dir", None):
        traits["settings_dir"] = str(settings_dir)
    return server_config(**traits)


def test_extension_is_enabled_on_install() -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    listing = subprocess.run(
        [str(jupyter), "server", "extension", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)
    assert "gitpilot_jupyter enabled" in text
    assert re.search(r"gitpilot_jupyter [0-9.]+\S* OK", text), text


async def test_one_service_is_shared_through_the_web_app_settings(
    jp_serverapp: Any, jp_root_dir: Path
) -> None:
    service = jp_serverapp.web_app.settings[SERVICE_KEY]
    assert isinstance(service, SandboxService)
    assert service.root_dir == jp_root_dir.resolve()


@pytest.mark.parametrize(
    "jp_server_config",
    [{"service_class": TaggedService, "allowed_backends": ["subprocess"]}],
    indirect=True,
)
async def test_service_class_and_allowed_backends(api: Api, jp_serverapp: Any) -> None:
    assert type(jp_serverapp.web_app.settings[SERVICE_KEY]) is TaggedService
    status = await api("GET", "api/sandbox/status")
    assert status.body["allowed_backends"] == ["subprocess"]
    plan = await api("POST", "api/sandbox/plan", {"language": "py", "code": "1", "backend": "off"})
    assert (plan.code, plan.body["code"]) == (403, "backend_not_allowed")
    saved = await api("PUT", "api/sandbox/config", {"backend": "off"})
    assert (saved.code, saved.body["code"]) == (403, "backend_not_allowed")


@pytest.mark.parametrize("jp_server_config", [{"max_timeout_sec": 30}], indirect=True)
async def test_max_timeout(api: Api) -> None:
    body = {"language": "python", "code": "1", "timeout_sec": 31}
    answer = await api("POST", "api/sandbox/plan", body)
    assert (answer.code, answer.body["code"]) == (400, "invalid_timeout")
    assert "30" in answer.body["message"]
    ok = await api("POST", "api/sandbox/plan", {**body, "timeout_sec": 30})
    assert ok.code == 200
    # The status says the range, so the lab's time limit field marks 31 before a save.
    assert (await api("GET", "api/sandbox/status")).body["max_timeout_sec"] == 30


async def test_env_var_turns_approval_off_when_config_is_unset(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITPILOT_SANDBOX_REQUIRE_APPROVAL", "0")
    assert (await api("GET", "api/sandbox/status")).body["require_approval"] is False
    answer = await api("POST", "api/sandbox/run", {"language": "python", "code": "print(5)"})
    assert answer.code == 200 and answer.body["stdout"] == "5\n"


@pytest.mark.parametrize("jp_server_config", [{"require_approval": True}], indirect=True)
async def test_server_config_wins_over_the_env_var(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITPILOT_SANDBOX_REQUIRE_APPROVAL", "0")
    answer = await api("POST", "api/sandbox/run", {"language": "python", "code": "print(5)"})
    assert (answer.code, answer.body["code"]) == (403, "approval_required")


@pytest.mark.parametrize("jp_server_config", [{"settings_dir": True}], indirect=True)
async def test_settings_dir(api: Api, settings_dir: Path, sandbox_config_dir: Path) -> None:
    answer = await api("PUT", "api/sandbox/config", {"timeout_sec": 42})
    assert answer.code == 200
    assert json.loads((settings_dir / "settings.json").read_text())["sandbox"]["timeout_sec"] == 42
    assert not (sandbox_config_dir / "settings.json").exists()


@pytest.mark.parametrize(
    ("trait", "value"),
    [
        ("allowed_backends", ["docker"]),
        ("allowed_backends", []),
        ("max_timeout_sec", 0),
        ("max_timeout_sec", 601),
        ("plan_ttl_sec", 0),
        ("isolation", "docker"),
    ],
)
def test_bad_trait_values_are_refused(trait: str, value: object) -> None:
    with pytest.raises(TraitError, match=trait):
        SandboxApp(**{trait: value}).check_traits()


@pytest.mark.parametrize(
    ("trait", "value", "message"),
    [
        ("env_passthrough", ["A B"], "'A B' is not a variable name"),
        ("env_passthrough", ["JUPYTER_TOKEN"], "approve its own plans"),
        ("env_allowlist", ["GITPILOT_MATRIXLAB_TOKEN"], "never passed"),
        ("agent_env_allowlist", ["JUPYTERHUB_API_TOKEN"], "approve its own plans"),
    ],
)
def test_an_env_list_naming_a_product_secret_stops_the_start(
    trait: str, value: list[str], message: str
) -> None:
    with pytest.raises(TraitError, match=message) as info:
        SandboxApp(**{trait: value}).build_env_lists()
    assert f"c.SandboxApp.{trait}" in str(info.value)


def test_an_env_variable_list_naming_a_product_secret_stops_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITPILOT_SANDBOX_AGENT_ENV_ALLOWLIST", "GITPILOT_MATRIXLAB_TOKEN")
    with pytest.raises(TraitError, match=r"agent_env_allowlist .* never passed"):
        SandboxApp(agent_env_allowlist=["DATABASE_URL"]).build_env_lists()


@pytest.mark.parametrize(
    "jp_server_config",
    [{"env_allowlist": ["SITE_NAME"], "agent_env_allowlist": ["AGENT_SITE"]}],
    indirect=True,
)
async def test_the_env_allowlists_reach_people_and_agents_apart(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_SITE", "for-agents")
    code = {"language": "python", "code": "import os; print(os.environ['AGENT_SITE'])"}
    person = await api("POST", "api/sandbox/plan", {**code, "env": ["AGENT_SITE"]})
    assert (person.code, person.body["code"]) == (400, "env_not_allowed")
    agent = await api("POST", "api/sandbox/agent/plan", {**code, "env": ["AGENT_SITE"]})
    assert agent.code == 200, agent.text
    assert {"label": "passes the server's AGENT_SITE", "ok": False} in agent.body["plan"]["checks"]
    refused = await api("POST", "api/sandbox/agent/plan", {**code, "env": ["SITE_NAME"]})
    assert (refused.code, refused.body["code"]) == (400, "env_not_allowed")
    auto = await api(
        "POST", "api/sandbox/agent/plan", {**code, "env": ["AGENT_SITE"], "approve": True}
    )
    ran = await api("POST", "api/sandbox/run", {"approval_token": auto.body["approval_token"]})
    assert ran.code == 200 and ran.body["stdout"] == "for-agents\n", ran.text


def test_every_trait_has_help_text() -> None:
    traits = SandboxApp.class_own_traits(config=True)
    assert {"require_approval", "allowed_backends", "max_timeout_sec"} <= set(traits)
    assert {"settings_dir", "plan_ttl_sec", "service_class"} <= set(traits)
    for name, trait in traits.items():
        assert trait.help and len(trait.help) > 20, name


@pytest.mark.parametrize("jp_server_config", [{"isolation": "none"}], indirect=True)
async def test_isolation_trait_chooses_the_isolator(api: Api) -> None:
    status = (await api("GET", "api/sandbox/status")).body
    assert status["isolation_report"]["choice"] == "none"
    assert status["isolation_report"]["engine"] == "none"
    assert not {"ro-root", "pidns", "netns"} & set(status["isolation"])
    # No wall: planning is refused before anyone approves, with the reason and the fix.
    run = await api("POST", "api/sandbox/plan", {"language": "python", "code": "print(1)"})
    assert run.code == 409 and run.body["code"] == "containment_unavailable", run.body
    assert "cannot keep a snippet away from your files" in run.body["message"]
    assert "GITPILOT_SANDBOX_ALLOW_UNCONTAINED=1" in run.body["message"]


@pytest.mark.parametrize(
    "jp_server_config", [{"isolation": "none", "allow_uncontained": True}], indirect=True
)
async def test_an_administrator_may_accept_uncontained_runs(api: Api) -> None:
    plan, _ = await plan_and_approve(api, language="python", code="print(1)")
    assert any(
        w["severity"] == "high" and "cannot keep the snippet away from your files" in w["label"]
        for w in plan["warnings"]
    ), plan["warnings"]
    network = next(c for c in plan["checks"] if "network" in c["label"])
    assert network["ok"] is False and "NOT cut off" in network["label"]
    result = await approved_run(api, "python", "print(1)")
    assert result.code == 200 and result.body["stdout"] == "1\n", result.body
    assert "uncontained" in result.body["isolation"]


@pytest.mark.parametrize(
    "jp_server_config",
    [
        {
            "matrixlab_runner_image": "example/runner:test",
            "matrixlab_sandbox_images": ["example/python:test"],
            "matrixlab_container_name": "gitpilot-admin-runner",
        }
    ],
    indirect=True,
)
async def test_matrixlab_traits_reach_the_lifecycle(api: Api) -> None:
    lifecycle = (await api("GET", "api/sandbox/matrixlab/lifecycle")).body
    text = json.dumps(lifecycle)
    assert "example/runner:test" in text and "example/python:test" in text
    assert "gitpilot-admin-runner" in text


@pytest.mark.parametrize(
    "jp_server_config",
    [{"allowed_backends": ["subprocess"], "max_timeout_sec": 0}],
    indirect=True,
)
async def test_one_bad_trait_serves_no_sandbox_rather_than_every_default(
    jp_fetch: Any, jp_serverapp: Any
) -> None:
    # Before, the bad max_timeout_sec made jupyter_server load the extension with every
    # trait at its default: allowed_backends was the default list, not the administrator's.
    answer = await jp_fetch("api", "sandbox", "status", raise_error=False)
    assert answer.code == 404  # the extension did not load
    assert SERVICE_KEY not in jp_serverapp.web_app.settings


@pytest.mark.parametrize("jp_server_config", [{"env_allowlist": ["JUPYTER_TOKEN"]}], indirect=True)
async def test_a_server_whose_list_names_its_token_serves_no_sandbox(
    jp_fetch: Any, jp_serverapp: Any
) -> None:
    answer = await jp_fetch("api", "sandbox", "status", raise_error=False)
    assert answer.code == 404  # the extension did not load: nothing runs with that list
    assert SERVICE_KEY not in jp_serverapp.web_app.settings
