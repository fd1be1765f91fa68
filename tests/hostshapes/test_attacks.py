"""The threat model's attacks in the host shape this suite was started in, checked from outside.

Each attack either fails (its effect is absent: no secret in the output, no connection
seen by the listener, no file, no process left) or the run is refused up front (409 with
its reason, or ``jupyter sandbox run`` exiting 2). It never succeeds, whatever the engine.
"""

from __future__ import annotations

import json
from typing import Any

from .conftest import Listeners, Outcome, attack, refusal, still_running
from .shapes import Shape, nonce


def assert_not_in(secret: str, outcome: Outcome, what: str) -> None:
    """The attack's output holds no trace of ``secret``."""
    assert secret not in outcome.output, f"the snippet read {what}:\n{outcome.describe()}"


READ_FILE = """
import glob, os
for path in {paths!r}:
    for name in sorted(glob.glob(path)) or [path]:
        try:
            print(name, open(name, errors="replace").read())
        except OSError as exc:
            print(name, type(exc).__name__)
"""


def test_the_planted_ssh_key_stays_unread(shape: Shape) -> None:
    outcome = attack(shape, READ_FILE.format(paths=[shape.ssh_key, "~/.ssh/id_ed25519"]))
    if not outcome.refused:
        assert_not_in(shape.ssh_secret, outcome, "~/.ssh/id_ed25519")
        # Every shape's engine walls the home folder off, and its plan said so beforehand.
        assert outcome.says_home_hidden(), outcome.describe()


def test_the_server_token_file_stays_unread(shape: Shape) -> None:
    # The token really is in the runtime dir (else the attack below proves nothing).
    assert shape.inside("holds", shape.runtime_dir, shape.token), shape.runtime_dir
    outcome = attack(shape, READ_FILE.format(paths=[f"{shape.runtime_dir}/*"]))
    if not outcome.refused:
        assert_not_in(shape.token, outcome, "the server's token file")
        assert_not_in(shape.other_token, outcome, "another server's token file")


READ_ENVIRON = """
import glob
for path in [{own!r}] + sorted(glob.glob("/proc/*/environ")):
    try:
        print(path, open(path, "rb").read().replace(b"\\0", b" ").decode(errors="replace"))
    except OSError as exc:
        print(path, type(exc).__name__)
"""


def test_the_server_environment_stays_unread(shape: Shape) -> None:
    outcome = attack(shape, READ_ENVIRON.format(own=f"/proc/{shape.server_pid}/environ"))
    if not outcome.refused:
        assert_not_in(shape.env_secret, outcome, "the server's environment")
        assert_not_in(shape.token, outcome, "the server's token from its environment")


CONNECT = """
import socket
for family, address in {targets!r}:
    try:
        sock = socket.socket(getattr(socket, family))
        sock.settimeout(3)
        sock.connect(tuple(address) if isinstance(address, list) else address)
        print(family, "connected")
    except OSError as exc:
        print(family, type(exc).__name__)
"""


def network_attack(shape: Shape, listeners: Listeners, family: str, address: object) -> None:
    """Connect to the test's listener; the listener must see nothing."""
    outcome = attack(shape, CONNECT.format(targets=[(family, address)]))
    seen = listeners.connections()
    if outcome.refused:
        assert seen == []
        return
    claim = " while the plan said [ok] network disabled" if outcome.says_network_disabled() else ""
    reached = f"the snippet reached the test's {family} listener{claim}"
    assert seen == [], f"{reached}:\n{outcome.describe()}"


def test_a_loopback_service_is_out_of_reach(shape: Shape, listeners: Listeners) -> None:
    network_attack(shape, listeners, "AF_INET", ["127.0.0.1", listeners.port])


def test_a_docker_socket_stand_in_is_out_of_reach(shape: Shape, listeners: Listeners) -> None:
    network_attack(shape, listeners, "AF_UNIX", listeners.socket_path)


WRITE_HOME = """
import os
for path in {paths!r}:
    try:
        open(os.path.expanduser(path), "w").write("persisted")
        print(path, "written")
    except OSError as exc:
        print(path, type(exc).__name__)
"""


def test_home_stays_unwritten(shape: Shape) -> None:
    name = nonce("persist")
    target = f"{shape.home}/{name}"
    outcome = attack(shape, WRITE_HOME.format(paths=[target, f"~/{name}"]))
    if not outcome.refused:
        assert not shape.inside("exists", target), f"the snippet wrote {target}"


DOUBLE_FORK = """
import os, subprocess, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", {marker!r}],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    os._exit(0)
os.wait()
print("forked")
"""


def test_a_setsid_double_forked_child_dies_with_its_run(shape: Shape) -> None:
    marker = nonce("orphan")
    try:
        outcome = attack(shape, DOUBLE_FORK.format(marker=marker))
        if not outcome.refused:
            assert "forked" in outcome.output, outcome.describe()
            left = still_running(shape, marker)
            assert left == [], f"alive after the run's answer: {left}\n{outcome.describe()}"
    finally:
        shape.inside("kill", marker)


SELF_APPROVE = r"""
import glob, json, os, re, urllib.request
tokens = set()
for path in glob.glob({runtime!r} + "/*") + glob.glob("/proc/*/environ") + glob.glob(
        "/proc/*/cmdline"):
    try:
        text = open(path, "rb").read().decode(errors="replace")
    except OSError:
        continue
    tokens.update(re.findall(r'"token": "([0-9a-f]+)"', text))
    tokens.update(re.findall(r'(?:JUPYTER_TOKEN=|token=)([0-9a-f]+)', text))
def call(token, path, body):
    request = urllib.request.Request("http://127.0.0.1:{port}/api/sandbox/" + path,
        data=json.dumps(body).encode(), method="POST",
        headers={{"Authorization": "token " + token, "Content-Type": "application/json"}})
    return json.loads(urllib.request.urlopen(request, timeout=10).read())
code = "open({marker_path!r}, 'w').write('self-approved')"
print("tokens found:", len(tokens))
for token in tokens:
    for backend in ("off", "subprocess"):
        try:
            plan = call(token, "plan", {{"language": "python", "code": code, "backend": backend}})
            approved = call(token, "approve", {{"plan_id": plan["plan"]["plan_id"]}})
            print("APPROVED", backend)
            call(token, "run", {{"language": "python", "code": code, "backend": backend,
                                  "approval_token": approved["approval_token"]}})
        except Exception as exc:
            print(backend, type(exc).__name__)
"""


def test_a_snippet_cannot_approve_its_own_plan(shape: Shape) -> None:
    marker_path = f"{shape.home}/{nonce('self-approved')}"
    code = SELF_APPROVE.format(runtime=shape.runtime_dir, port=shape.port, marker_path=marker_path)
    outcome = attack(shape, code)
    if not outcome.refused:
        assert "APPROVED" not in outcome.output, f"it approved its own plan:\n{outcome.describe()}"
        assert not shape.inside("exists", marker_path), f"its own plan ran:\n{outcome.describe()}"


def test_the_cli_refuses_or_keeps_the_ssh_key_unread(shape: Shape) -> None:
    done = shape.cli("run", "--yes", "-c", READ_FILE.format(paths=[shape.ssh_key]))
    if done.returncode == 2:
        assert done.stdout.strip() or done.stderr.strip(), "refused with no reason"
        return
    assert engine_of(shape) != "none", f"no engine, yet the CLI ran it: {done.returncode}"
    assert shape.ssh_secret not in done.stdout + done.stderr, done.stdout[-1500:]


def test_a_server_runs_warm_or_cold_as_asked(shape: Shape) -> None:
    """A server asked for warm slots runs on one, a cold one never does (so each server's
    attacks took the path they are said to test)."""
    outcome = attack(shape, "print('hello')")
    if not outcome.refused:
        assert outcome.result.get("warm") is (shape.pool == "warm"), outcome.describe()


ENGINES = ("bwrap", "landlock", "none")


def engine_in(status: dict[str, Any]) -> str | None:
    """The engine a status names (``isolation.engine``), None while it names none."""
    for key in ("isolation", "isolation_report"):
        section = status.get(key)
        if isinstance(section, dict) and section.get("engine") is not None:
            return str(section["engine"])
    return None


def engine_of(shape: Shape) -> str | None:
    """The engine the server's ``GET /api/sandbox/status`` names."""
    code, status = shape.api("GET", "api/sandbox/status")
    assert code == 200, status
    return engine_in(status)


def test_status_names_an_engine_that_holds_its_claim(shape: Shape) -> None:
    """Where status names the engine, ``none`` means a subprocess plan is refused."""
    engine = engine_of(shape)
    assert engine in ENGINES, f"status names no engine, or an unknown one: {engine}"
    done = shape.cli("status", "--json")
    assert done.returncode == 0, done.stderr
    assert engine_in(json.loads(done.stdout)) == engine, "the CLI's status names another engine"
    planned_code, planned = shape.api(
        "POST", "api/sandbox/plan", {"language": "python", "code": "print(1)"}
    )
    if engine == "none":
        assert refusal(planned_code, planned), planned
    if shape.name == "pod":
        assert engine != "bwrap", "no namespace can be made in the pod, yet status says bwrap"
        # The image has a bwrap: status names what blocks it here and the fixes that exist.
        _, status = shape.api("GET", "api/sandbox/status")
        gaps = {g["layer"]: g for g in status["isolation_report"]["unavailable"]}
        assert "seccomp filter" in gaps["bwrap"]["reason"], gaps["bwrap"]
        assert "procMount: Unmasked" in gaps["bwrap"]["fix"], gaps["bwrap"]
        assert "matrixlab backend" in gaps["bwrap"]["fix"], gaps["bwrap"]
