"""The host-shape attacks on a session's cells (a kernel that lives between cells), from outside.

As for single runs (test_attacks.py), each attack fails or is refused up front: where the shape
cannot hold a session (no mount namespace of its own for the kernel's sockets: the namespace-free
engine, the pod), the cell is refused when it is planned, 409 ``session_unavailable`` with the
reason and the fix, before anyone is asked to approve it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from .conftest import Listeners, Outcome, attack, refusal, still_running
from .shapes import Shape, nonce
from .test_attacks import CONNECT, DOUBLE_FORK, READ_FILE, assert_not_in, engine_of


@pytest.fixture
def session(shape: Shape) -> Iterator[str]:
    """A fresh session name of the shape's user, its session stopped after the test."""
    name = nonce("session")
    yield name
    shape.api("DELETE", f"api/sandbox/sessions/{name}")


def in_session(shape: Shape, name: str, code: str) -> Outcome:
    """Plan, approve and run ``code`` as a cell of session ``name`` (started by its first
    cell); a shape that cannot hold one refuses it at plan time, with its reason and fix."""
    status, planned = shape.api(
        "POST", "api/sandbox/plan", {"language": "python", "code": code, "session": name}
    )
    if status != 200:
        assert refusal(status, planned), planned
        assert planned["code"] == "session_unavailable", planned
        assert "To fix" in planned["message"], planned
        return Outcome(True, {}, {})
    outcome = attack(shape, code, session=name)
    # Planned means it can run: never a refusal after someone approved it.
    assert not outcome.refused, f"a session cell refused after its approval:\n{outcome.describe()}"
    assert outcome.result.get("sandbox_id") == name, outcome.describe()
    return outcome


def test_sessions_are_refused_at_plan_time_where_the_shape_cannot_hold_them(
    shape: Shape, session: str
) -> None:
    outcome = in_session(shape, session, "print('hello')")
    if engine_of(shape) == "bwrap":
        assert not outcome.refused and "hello" in outcome.output, outcome.describe()
    else:
        assert outcome.refused, f"a session ran on the {engine_of(shape)} engine"
        status, started = shape.api("POST", "api/sandbox/sessions", {"name": session})
        assert status == 409 and started["code"] == "session_unavailable", started


def test_a_session_cell_leaves_the_ssh_key_unread(shape: Shape, session: str) -> None:
    read = READ_FILE.format(paths=[shape.ssh_key, "~/.ssh/id_ed25519"])
    outcome = in_session(shape, session, read)
    if not outcome.refused:
        assert_not_in(shape.ssh_secret, outcome, "~/.ssh/id_ed25519 from a session")
        assert outcome.says_home_hidden(), outcome.describe()
        # Still so in the session's next cell (its kernel is the same process).
        again = in_session(shape, session, read)
        assert_not_in(shape.ssh_secret, again, "~/.ssh/id_ed25519 in a session's second cell")


@pytest.mark.parametrize("family", ["AF_INET", "AF_UNIX"])
def test_a_session_cell_reaches_no_network_when_off(
    shape: Shape, listeners: Listeners, session: str, family: str
) -> None:
    address = ["127.0.0.1", listeners.port] if family == "AF_INET" else listeners.socket_path
    outcome = in_session(shape, session, CONNECT.format(targets=[(family, address)]))
    seen = listeners.connections()
    if not outcome.refused:
        assert outcome.says_network_disabled(), outcome.describe()
    assert seen == [], f"a session cell reached the test's {family} listener:\n{outcome.describe()}"


#: A session's folder and its kernel's doors, as the session itself sees them.
OWN_DOORS = """
import glob, json, os, socket
folder = os.getcwd()
sock = socket.socket(socket.AF_UNIX)
sock.connect(folder + "/.kernel-1")
print(json.dumps({"folder": folder, "own": "connected",
                  "doors": sorted(glob.glob(folder + "/.kernel*"))}))
"""
#: What another session or run tries on those doors (each path read or connected to).
PROBE_DOORS = """
import glob, json, os, socket
answers = {{}}
paths = {paths!r} + glob.glob("/proc/*/root" + {folder!r} + "/.kernel*")
for path in paths:
    try:
        if path.endswith(".json") or os.path.isdir(path):
            open(path).read() if path.endswith(".json") else os.listdir(path)
            answers[path] = "read"
        else:
            socket.socket(socket.AF_UNIX).connect(path)
            answers[path] = "connected"
    except OSError as exc:
        answers[path] = type(exc).__name__
print("PROBE", json.dumps(answers))
"""


def test_another_session_or_run_cannot_reach_a_sessions_kernel(shape: Shape) -> None:
    first, second = nonce("session"), nonce("session")
    try:
        own = in_session(shape, first, OWN_DOORS)
        if own.refused:
            return
        doors = json.loads(own.result["stdout"])
        assert doors["own"] == "connected" and len(doors["doors"]) >= 5, doors
        paths = [doors["folder"], *doors["doors"]]
        code = PROBE_DOORS.format(paths=paths, folder=doors["folder"])
        for outcome in (in_session(shape, second, code), attack(shape, code)):
            assert not outcome.refused, outcome.describe()
            line = next(x for x in outcome.result["stdout"].splitlines() if x.startswith("PROBE"))
            answers = json.loads(line.split(" ", 1)[1])
            reached = {p: a for p, a in answers.items() if a in ("read", "connected")}
            assert reached == {}, f"another sandbox reached a session's kernel: {reached}"
        # The first session is untouched and still answers.
        assert "hello" in in_session(shape, first, "print('hello')").output
    finally:
        for name in (first, second):
            shape.api("DELETE", f"api/sandbox/sessions/{name}")


def test_nothing_of_a_session_outlives_its_stop(shape: Shape, session: str) -> None:
    marker = nonce("orphan")
    try:
        outcome = in_session(shape, session, DOUBLE_FORK.format(marker=marker))
        if outcome.refused:
            return
        assert "forked" in outcome.output, outcome.describe()
        # Alive while the session lives (the cell's children are the session's)...
        deadline = time.monotonic() + 10
        while not still_running(shape, marker, grace=0) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert still_running(shape, marker, grace=0), "the session's child did not start"
        status, stopped = shape.api("DELETE", f"api/sandbox/sessions/{session}")
        assert status == 200, stopped
        # ...and gone by the stop's answer.
        left = still_running(shape, marker, grace=0)
        assert left == [], f"alive after the session's stop: {left}"
    finally:
        shape.inside("kill", marker)
