"""Who changes the settings of a server, and how far (issue #30, item 1).

Two real users on a real server (an identity provider with users): the settings
file applies to every run on the server, so only its owner changes it; a change
that weakens a wall (network on for every run, a longer timeout, ``off``) is the
administrator's to allow, never a caller's ``confirm``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

from .helpers import Api, server_config
from .test_auth import XSRF, HeaderIdentityProvider

XSRF_HEADERS = {"Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF}
ALICE = {"X-Test-User": "alice", **XSRF_HEADERS}
BOB = {"X-Test-User": "bob", **XSRF_HEADERS}
CONFIG = "api/sandbox/config"
#: What shows which backend a run really had, and whether its network was on.
PROBE = {"language": "python", "code": "print('ran')"}


@pytest.fixture
def jp_server_config(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Config:
    """Two users; ``param``: SandboxApp traits, ``hub_user`` for ``$JUPYTERHUB_USER``, and
    ``shared_secret`` for jupyter_server's own token login (one principal) instead."""
    traits = dict(getattr(request, "param", {"settings_owners": ["alice"]}))
    hub_user = traits.pop("hub_user", None)
    if hub_user is not None:
        monkeypatch.setenv("JUPYTERHUB_USER", hub_user)
    shared_secret = traits.pop("shared_secret", False)
    for name, value in traits.pop("env", {}).items():
        monkeypatch.setenv(name, value)
    config = server_config(**traits)
    if not shared_secret:
        config.ServerApp.identity_provider_class = HeaderIdentityProvider
    return config


def saved(folder: Path) -> dict[str, Any]:
    path = folder / "settings.json"
    return json.loads(path.read_text())["sandbox"] if path.exists() else {}


async def backend_of_next_run(api: Api, who: dict[str, str]) -> str:
    # confirm: the owner's yes to an off plan's high warning (else it waits unrun).
    body = {**PROBE, "confirm": True}
    answer = await api("POST", "api/sandbox/plan-and-run", body, headers=who)
    assert answer.code == 200 and answer.body["result"]["stdout"] == "ran\n", answer.text
    backend: str = answer.body["result"]["backend"]
    return backend


async def test_another_user_cannot_change_or_weaken_the_owners_settings(
    api: Api, sandbox_config_dir: Path
) -> None:
    for change in (
        {"backend": "off", "confirm": True},
        {"allow_network": True},
        {"timeout_sec": 30},
    ):
        refused = await api("PUT", CONFIG, change, headers=BOB)
        assert (refused.code, refused.body["code"]) == (403, "setting_not_allowed"), change
        message = refused.body["message"]
        assert "'bob' is not its owner" in message and "c.SandboxApp.settings_owners" in message
    assert saved(sandbox_config_dir) == {}
    # Bob still reads them, and Alice's next run is as sandboxed as before.
    assert (await api("GET", CONFIG, headers=BOB)).body["backend"] == "subprocess"
    assert await backend_of_next_run(api, ALICE) == "subprocess"
    # Alice, the owner, changes what does not weaken a wall.
    changed = await api("PUT", CONFIG, {"timeout_sec": 30, "memory_limit_mb": 512}, headers=ALICE)
    assert changed.code == 200, changed.text
    assert saved(sandbox_config_dir) == {"timeout_sec": 30, "memory_limit_mb": 512}


@pytest.mark.parametrize(
    "jp_server_config", [{"settings_owners": ["alice"], "max_timeout_sec": 300}], indirect=True
)
async def test_the_owner_cannot_weaken_a_wall_without_the_administrator(
    api: Api, sandbox_config_dir: Path
) -> None:
    off = await api("PUT", CONFIG, {"backend": "off", "confirm": True}, headers=ALICE)
    assert (off.code, off.body["code"]) == (403, "backend_not_allowed")
    # The fix, in the message: the administrator lists it.
    assert (
        "c.SandboxApp.allowed_backends = ['subprocess', 'matrixlab', 'off']"
        in (off.body["message"])
    )
    network = await api("PUT", CONFIG, {"allow_network": True}, headers=ALICE)
    assert (network.code, network.body["code"]) == (403, "setting_not_allowed")
    assert "c.SandboxApp.user_may_weaken = True" in network.body["message"]
    longer = await api("PUT", CONFIG, {"timeout_sec": 600, "confirm": True}, headers=ALICE)
    assert (longer.code, longer.body["code"]) == (403, "setting_not_allowed")
    assert "maximum of 300 s" in longer.body["message"]
    assert saved(sandbox_config_dir) == {}
    # Nor can a run ask for off; one run may still ask for the network, in its own plan.
    asked = await api("POST", "api/sandbox/plan", {**PROBE, "backend": "off"}, headers=ALICE)
    assert (asked.code, asked.body["code"]) == (403, "backend_not_allowed")
    one = await api("POST", "api/sandbox/plan", {**PROBE, "allow_network": True}, headers=ALICE)
    assert one.code == 200 and one.body["plan"]["network"] is True
    assert (await api("GET", "api/sandbox/status", headers=ALICE)).body["allowed_backends"] == [
        "subprocess",
        "matrixlab",
    ]


@pytest.mark.parametrize(
    "jp_server_config",
    [
        {
            "hub_user": "alice",
            "allowed_backends": ["subprocess", "off"],
            "user_may_weaken": True,
        }
    ],
    indirect=True,
)
async def test_what_the_administrator_allows_the_owner_may_do(
    api: Api, sandbox_config_dir: Path
) -> None:
    # $JUPYTERHUB_USER is the owner when the administrator names none.
    refused = await api("PUT", CONFIG, {"backend": "off", "confirm": True}, headers=BOB)
    assert (refused.code, refused.body["code"]) == (403, "setting_not_allowed")
    unconfirmed = await api("PUT", CONFIG, {"backend": "off"}, headers=ALICE)
    assert (unconfirmed.code, unconfirmed.body["code"]) == (409, "confirmation_required")
    switched = await api("PUT", CONFIG, {"backend": "off", "confirm": True}, headers=ALICE)
    assert switched.code == 200 and switched.body["backend"] == "off"
    network = await api("PUT", CONFIG, {"allow_network": True}, headers=ALICE)
    assert network.code == 200 and network.body["settings"]["allow_network"] is True
    assert saved(sandbox_config_dir) == {"backend": "off", "allow_network": True}
    assert await backend_of_next_run(api, ALICE) == "off"
    # Bob can neither undo nor redo it: the owner's settings are the owner's.
    back = await api("PUT", CONFIG, {"backend": "subprocess"}, headers=BOB)
    assert (back.code, back.body["code"]) == (403, "setting_not_allowed")


@pytest.mark.parametrize("jp_server_config", [{}], indirect=True)
async def test_a_server_with_users_and_no_owner_lets_nobody_change_them(
    api: Api, sandbox_config_dir: Path
) -> None:
    for who in (ALICE, BOB):
        refused = await api("PUT", CONFIG, {"timeout_sec": 30}, headers=who)
        assert (refused.code, refused.body["code"]) == (403, "setting_not_allowed")
        assert "it names none" in refused.body["message"]
    assert saved(sandbox_config_dir) == {}


@pytest.mark.parametrize("jp_server_config", [{"shared_secret": True}], indirect=True)
async def test_the_token_holder_is_the_one_principal(api: Api, sandbox_config_dir: Path) -> None:
    # Every holder of the token is one principal, the server's own user: no owner to
    # tell apart, and weakening the network is theirs; off still needs the administrator.
    network = await api("PUT", CONFIG, {"allow_network": True})
    assert network.code == 200 and network.body["settings"]["allow_network"] is True
    off = await api("PUT", CONFIG, {"backend": "off", "confirm": True})
    assert (off.code, off.body["code"]) == (403, "backend_not_allowed")
    assert saved(sandbox_config_dir) == {"allow_network": True}


@pytest.mark.parametrize(
    "jp_server_config",
    [{"shared_secret": True, "env": {"GITPILOT_SANDBOX_ALLOWED_BACKENDS": "off, subprocess"}}],
    indirect=True,
)
async def test_the_environment_is_the_servers_default_list(api: Api) -> None:
    status = await api("GET", "api/sandbox/status")
    assert status.body["allowed_backends"] == ["off", "subprocess"]
    switched = await api("PUT", CONFIG, {"backend": "off", "confirm": True})
    assert switched.code == 200 and switched.body["backend"] == "off"
    matrixlab = await api("PUT", CONFIG, {"backend": "matrixlab"})
    assert (matrixlab.code, matrixlab.body["code"]) == (403, "backend_not_allowed")
