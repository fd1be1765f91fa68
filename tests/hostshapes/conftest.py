"""The host-shape suite's fixtures: one server per shape, attacks through its REST flow.

Engine-agnostic: an attack passes when it fails (checked from outside) or when the run
is refused up front (409 with a code and a reason); it never passes by succeeding.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.service.planner import HOME_HIDDEN_CHECKS
from tests.support.system import require_system

from .shapes import (
    POD_IMAGE,
    POD_IMAGE_ENV,
    POOL_MODE,
    SHAPE_ENV,
    Shape,
    start_local,
    start_pod,
    stop_local,
    stop_pod,
)

collect_ignore_glob = [] if sys.platform == "linux" else ["test_*.py"]

SHAPES = ("local", "pip-only", "pod")


def shape_name() -> str:
    """The shape this suite was started in (``GITPILOT_HOST_SHAPE``, default ``local``)."""
    name = os.environ.get(SHAPE_ENV, "local")
    if name not in SHAPES:
        raise pytest.UsageError(f"{SHAPE_ENV}={name!r}: one of {', '.join(SHAPES)}")
    return name


@pytest.fixture(scope="session", params=list(POOL_MODE))
def shape(request: pytest.FixtureRequest) -> Iterator[Shape]:
    """The running server of this shape, with its planted secrets; one cold, one warm."""
    name, pool = shape_name(), str(request.param)
    if name == "pod":
        image = os.environ.get(POD_IMAGE_ENV, POD_IMAGE)
        inspect = ["docker", "image", "inspect", image]
        have = (
            shutil.which("docker") is not None
            and subprocess.run(inspect, capture_output=True).returncode == 0
        )
        require_system("the pod image", have, f"build it: scripts/build-pod-image.sh ({image})")
        pod, container = start_pod(image, pool)
        yield pod
        stop_pod(container)
        return
    if name == "pip-only":
        # The harness itself: the project must find no bubblewrap in this shape.
        assert shutil.which("bwrap") is None, "pip-only shape with a bwrap on PATH"
    local, server = start_local(name, pool)
    yield local
    stop_local(local, server)


@dataclass
class Outcome:
    """What one attack got: refused up front, or the run's result."""

    refused: bool
    plan: dict[str, Any]
    result: dict[str, Any]

    @property
    def output(self) -> str:
        """What the snippet printed (stdout and stderr)."""
        return str(self.result.get("stdout", "")) + str(self.result.get("stderr", ""))

    def says_network_disabled(self) -> bool:
        """True when the approved plan claimed ``[ok] network disabled``."""
        return any(
            check.get("ok") and check.get("label") == "network disabled"
            for check in self.plan.get("checks", [])
        )

    def says_home_hidden(self) -> bool:
        """True when the approved plan claimed ``[ok]`` for the home folder and ``~/.ssh``."""
        return any(
            check.get("ok") and check.get("label") in HOME_HIDDEN_CHECKS
            for check in self.plan.get("checks", [])
        )

    def describe(self) -> str:
        """For a failure message: the plan's checks and warnings, the result's layers."""
        return json.dumps(
            {
                "checks": self.plan.get("checks"),
                "warnings": self.plan.get("warnings"),
                "isolation": self.result.get("isolation"),
                "output": self.output[-1500:],
            }
        )


def refusal(code: int, body: Any) -> bool:
    """True for a refusal up front; a refusal must name its reason."""
    if code != 409:
        return False
    assert isinstance(body, dict) and body.get("code") and body.get("message"), body
    return True


def attack(shape: Shape, code: str, **extra: Any) -> Outcome:
    """Plan, approve and run ``code`` on the default backend over the REST API."""
    snippet = {"language": "python", "code": code, **extra}
    status, planned = shape.api("POST", "api/sandbox/plan", snippet)
    if refusal(status, planned):
        return Outcome(True, {}, {})
    assert status == 200, planned
    plan = planned["plan"]
    status, approved = shape.api("POST", "api/sandbox/approve", {"plan_id": plan["plan_id"]})
    assert status == 200, approved
    body = {**snippet, "approval_token": approved["approval_token"]}
    status, result = shape.api("POST", "api/sandbox/run", body)
    if refusal(status, result):
        return Outcome(True, plan, {})
    assert status == 200, result
    assert result.get("backend") == "subprocess", result
    if shape.pool == "cold":
        assert result.get("warm") is False, result
    # A warm server's runs are checked by test_a_server_runs_warm_or_cold_as_asked: the attack
    # itself is judged by its effect, whichever path ran it.
    return Outcome(False, plan, result)


@dataclass
class Listeners:
    """A loopback TCP listener and a unix socket (a docker.sock stand-in) of the user's."""

    port: int
    socket_path: str
    process: subprocess.Popen[str]

    def connections(self) -> list[str]:
        """Stop listening; each connection seen (``tcp`` / ``unix``)."""
        out, _ = self.process.communicate(timeout=30)
        return [line for line in out.splitlines() if line]


@pytest.fixture
def listeners(shape: Shape) -> Iterator[Listeners]:
    """Listeners opened by the test as the user in the shape, before the attack runs."""
    from .shapes import nonce

    path = f"/var/tmp/{nonce('docker')}.sock"
    process = shape.spawn("listen", path)
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first, "the listener did not start"
    found = Listeners(int(json.loads(first)["port"]), path, process)
    # Both listen and see a connection of the user's (else an attack's "nothing seen" proves
    # nothing); the probes' lines are read here, so connections() holds only the attack's.
    for family, address in (("AF_INET", f"127.0.0.1:{found.port}"), ("AF_UNIX", path)):
        assert shape.inside("connect", family, address), f"the user cannot reach {address}"
        assert process.stdout.readline().strip() == ("tcp" if family == "AF_INET" else "unix")
    yield found
    if process.poll() is None:
        process.kill()
        process.wait()
    shape.run(["rm", "-f", path])


def still_running(shape: Shape, marker: str, grace: float = 1.0) -> list[str]:
    """Processes in the shape whose command line holds ``marker``, after a short grace."""
    deadline = time.monotonic() + grace
    while True:
        found = [line for line in shape.inside("procs") if marker in line]
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)
