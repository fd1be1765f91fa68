"""A real JupyterHub with two real unix users, set up as ``docs/admin/jupyterhub.md`` says.

The hub (``jupyterhub`` and the Python ``configurable-http-proxy`` from the test extras)
runs on loopback as root with ``LocalProcessSpawner``; each user's single-user server is
a process of that user's uid, with the recipe's ``jupyter_server_config.py``. Everything
goes through the hub's proxy with each user's own token, as a browser or an agent would.

Checked from outside: user A's plan -> approve -> run works and is contained (the other
user's home, the hub's files, A's own secrets, the hub's API and its token are out of
the snippet's reach, although A's uid may read those files), each result names its
isolation layers, ``off`` cannot be chosen, and user B can neither see nor approve A's
plan (the servers are separate), nor change her settings once she shares her server with him.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.hub import Hub, HubUser, make_user, proxy_command, start_hub
from tests.support.system import require_system

pytestmark = pytest.mark.timeout(180)

USERS = ("gitpilot-hub-a", "gitpilot-hub-b")

# What a hostile snippet of A tries; each entry is what happened ("read" would be a breach).
ATTACK = r"""
import json, os, socket
out = {}
for label, path in %(paths)r.items():
    try:
        with open(path, "rb") as handle:
            out[label] = "read " + handle.read(200).decode(errors="replace")
    except OSError as exc:
        out[label] = type(exc).__name__
try:
    socket.create_connection(("127.0.0.1", %(hub_port)d), timeout=2).close()
    out["hub_api"] = "connected"
except OSError as exc:
    out["hub_api"] = type(exc).__name__
out["hub_token"] = [k for k in os.environ if "TOKEN" in k or k.startswith("JUPYTERHUB")]
print(json.dumps(out))
"""


def require_hub_host() -> None:
    """Root (to make users and spawn their servers), jupyterhub, the proxy, useradd."""
    if os.geteuid() != 0:
        pytest.skip("a real hub with two unix users needs root (useradd, LocalProcessSpawner)")
    require_system(
        "jupyterhub",
        importlib.util.find_spec("jupyterhub") is not None,
        "pip install 'gitpilot-jupyter[test]' brings it",
    )
    require_system(
        "configurable-http-proxy",
        proxy_command() is not None,
        "the pip package configurable-http-proxy (in the test extras) brings it",
    )
    for tool in ("useradd", "usermod", "unshare", "setpriv"):
        require_system(tool, shutil.which(tool) is not None, f"{tool} is not on PATH")


@pytest.fixture(scope="module")
def hub() -> Iterator[tuple[Hub, dict[str, HubUser], Path]]:
    """The hub with both users' servers up; their folder (0755, beside pytest's 0700 one)."""
    require_hub_host()
    base = Path(tempfile.mkdtemp(prefix="gitpilot-hub-test-"))
    base.chmod(0o755)
    try:
        users = {name: make_user(name, base / f"home-{name}") for name in USERS}
        hub_dir = base / "hub"
        hub_dir.mkdir(mode=0o755)
        started = start_hub(hub_dir, list(users.values()))
        try:
            started.spawn(USERS)
            yield started, users, base
        finally:
            started.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def call(http: httpx.Client, method: str, url: str, body: Any = None) -> httpx.Response:
    """One request through the proxy (JSON body when given)."""
    return http.request(method, url, json=body)


def plan_approve_run(http: httpx.Client, user: str, code: str) -> dict[str, Any]:
    """``code`` planned, approved and run on ``user``'s server; the run's answer."""
    api = f"/user/{user}/api/sandbox"
    planned = call(http, "POST", f"{api}/plan", {"language": "python", "code": code})
    assert planned.status_code == 200, planned.text
    plan_id = planned.json()["plan"]["plan_id"]
    approved = call(http, "POST", f"{api}/approve", {"plan_id": plan_id})
    assert approved.status_code == 200, approved.text
    ran = call(http, "POST", f"{api}/run", {"approval_token": approved.json()["approval_token"]})
    assert ran.status_code == 200, ran.text
    result: dict[str, Any] = ran.json()
    return result


def readable_as(user: HubUser, path: Path) -> bool:
    """Whether ``user``'s uid reads ``path`` outside any sandbox (``setpriv``, no groups)."""
    drop = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]
    return subprocess.run([*drop, "cat", str(path)], capture_output=True).returncode == 0


def test_a_users_run_is_contained_and_names_its_layers(
    hub: tuple[Hub, dict[str, HubUser], Path],
) -> None:
    server, users = hub[:2]
    alice, bob = users[USERS[0]], users[USERS[1]]
    secret = secrets.token_hex(12)
    # Bob's notes are world-readable and the hub's files are what a plain hub leaves in its
    # folder: Alice's uid may read them, so only the sandbox keeps her snippet away.
    notes = bob.home / "notes.txt"
    notes.write_text(f"bob {secret}\n")
    notes.chmod(0o644)
    own_key = alice.home / ".ssh" / "id_ed25519"
    own_key.parent.mkdir(mode=0o700)
    own_key.write_text(f"alice {secret}\n")
    for path in (own_key.parent, own_key):
        os.chown(path, alice.uid, alice.gid)
    hub_config = server.root_dir / "jupyterhub_config.py"
    with open(hub_config, "a", encoding="utf-8") as config:
        config.write(f"# {secret}\n")
    hub_config.chmod(0o644)
    targets = {
        "other_home": notes,
        "hub_config": hub_config,
        "hub_db": server.root_dir / "jupyterhub.sqlite",
        "own_ssh_key": own_key,
    }
    for label, path in targets.items():
        assert readable_as(alice, path), f"{label}: the test's premise does not hold"

    with server.client_as(server.user_token(alice.name)) as http:
        status = http.get(f"/user/{alice.name}/api/sandbox/status")
        assert status.status_code == 200, status.text
        report = status.json()
        assert report["backend"] == "subprocess" and report["require_approval"] is True
        assert report["allowed_backends"] == ["subprocess"]
        assert report["isolation_report"]["engine"] in ("bwrap", "landlock"), report
        # The recipe takes `off` away: it can be neither saved nor asked for.
        saved = call(
            http,
            "PUT",
            f"/user/{alice.name}/api/sandbox/config",
            {"backend": "off", "confirm": True},
        )
        assert (saved.status_code, saved.json()["code"]) == (403, "backend_not_allowed")
        asked = call(
            http,
            "POST",
            f"/user/{alice.name}/api/sandbox/plan",
            {"language": "python", "code": "print(1)", "backend": "off"},
        )
        assert (asked.status_code, asked.json()["code"]) == (403, "backend_not_allowed")

        paths = {label: str(path) for label, path in targets.items()}
        result = plan_approve_run(
            http, alice.name, ATTACK % {"paths": paths, "hub_port": server.hub_port}
        )
    assert result["exit_code"] == 0, result["stderr"]
    seen = json.loads(result["stdout"])
    assert secret not in result["stdout"] + result["stderr"]
    for label in targets:
        assert not seen[label].startswith("read"), (label, seen[label])
    assert seen["hub_api"] != "connected"
    assert seen["hub_token"] == []
    layers = set(result["isolation"])
    assert {"fs-allowlist", "hidden-credentials", "seccomp", "env-scrub"} <= layers, layers
    assert layers & {"netns", "net-denied"}, layers
    if alice.cgroup is not None:
        # The cgroup delegated to Alice (as the recipe does on cgroup v1) caps her runs.
        assert {"cgroup-memory", "cgroup-pids"} <= layers, layers


def test_the_other_user_cannot_see_or_approve_a_plan(
    hub: tuple[Hub, dict[str, HubUser], Path],
) -> None:
    server, users, _ = hub
    alice, bob = users[USERS[0]], users[USERS[1]]
    alice_api, bob_api = f"/user/{alice.name}/api/sandbox", f"/user/{bob.name}/api/sandbox"
    with server.client_as(server.user_token(alice.name)) as as_alice:
        planned = call(as_alice, "POST", f"{alice_api}/plan", {"language": "python", "code": "1"})
        assert planned.status_code == 200, planned.text
        plan_id = planned.json()["plan"]["plan_id"]
        with server.client_as(server.user_token(bob.name)) as as_bob:
            # Alice's server answers only Alice: the hub's auth refuses Bob's token there.
            for method, route, body in (
                ("GET", "plans", None),
                ("GET", "status", None),
                ("POST", "approve", {"plan_id": plan_id}),
            ):
                answer = call(as_bob, method, f"{alice_api}/{route}", body)
                assert answer.status_code == 403, (route, answer.status_code, answer.text)
            # His own server is another process, with no plan of hers.
            theirs = call(as_bob, "POST", f"{bob_api}/approve", {"plan_id": plan_id})
            assert (theirs.status_code, theirs.json()["code"]) == (404, "plan_not_found")
            listed = call(as_bob, "GET", f"{bob_api}/plans")
            assert listed.status_code == 200
            assert plan_id not in [p["plan_id"] for p in listed.json()["plans"]]
            own = plan_approve_run(as_bob, bob.name, "import os; print(os.getuid() != 0)")
            assert own["stdout"] == "True\n" and own["isolation"], own
        # Still pending for Alice, who approves and runs it.
        approved = call(as_alice, "POST", f"{alice_api}/approve", {"plan_id": plan_id})
        assert approved.status_code == 200, approved.text


def test_a_user_the_server_is_shared_with_cannot_change_its_settings(
    hub: tuple[Hub, dict[str, HubUser], Path],
) -> None:
    server, users, _ = hub
    alice, bob = users[USERS[0]], users[USERS[1]]
    alice_api = f"/user/{alice.name}/api/sandbox"
    with server.client() as admin:
        shared = admin.post(f"/hub/api/shares/{alice.name}/", json={"user": bob.name})
        assert shared.status_code in (200, 201), shared.text
    try:
        # A new token: the server would keep answering an old one as it did before the share.
        with server.client_as(server.user_token(bob.name)) as as_bob:
            # The hub lets Bob into Alice's server now; he reads her settings...
            seen = call(as_bob, "GET", f"{alice_api}/config")
            assert seen.status_code == 200, seen.text
            # ...and changes none of them: network on for her next runs least of all.
            for change in ({"allow_network": True}, {"timeout_sec": 30}):
                refused = call(as_bob, "PUT", f"{alice_api}/config", change)
                assert (refused.status_code, refused.json()["code"]) == (
                    403,
                    "setting_not_allowed",
                ), refused.text
                assert f"{bob.name!r} is not its owner" in refused.json()["message"]
        with server.client_as(server.user_token(alice.name)) as as_alice:
            # Alice, the owner, changes what the administrator leaves her...
            own = call(as_alice, "PUT", f"{alice_api}/config", {"timeout_sec": 45})
            assert own.status_code == 200 and own.json()["settings"]["timeout_sec"] == 45
            # ...but not the network for every run (the recipe's user_may_weaken = False).
            network = call(as_alice, "PUT", f"{alice_api}/config", {"allow_network": True})
            assert (network.status_code, network.json()["code"]) == (403, "setting_not_allowed")
            assert call(as_alice, "GET", f"{alice_api}/config").json()["allow_network"] is False
            call(as_alice, "PUT", f"{alice_api}/config", {"timeout_sec": 120})
    finally:
        with server.client() as admin:
            admin.delete(f"/hub/api/shares/{alice.name}/")
