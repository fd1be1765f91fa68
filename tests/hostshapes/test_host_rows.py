"""The threat model's rows 2, 3, 6 and 8 in the host shape this suite was started in.

As in ``test_attacks.py``: each attack fails, checked from outside the run (the host's
kernel setting unchanged, no file left, no process alive, the output capped), or the run
is refused up front, or, for memory, the plan names the gap before approval.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from .conftest import attack, still_running
from .shapes import Shape, nonce

WRITE_FILES = """
for path, text in {writes!r}:
    try:
        with open(path, "w") as handle:
            handle.write(text)
        print(path, "written")
    except OSError as exc:
        print(path, type(exc).__name__)
"""

#: A kernel setting any root process of the host could change (row 2: the host kernel).
DOMAINNAME = "/proc/sys/kernel/domainname"


def test_the_host_kernel_settings_stay_unchanged(shape: Shape) -> None:
    before = shape.inside("read", DOMAINNAME)
    assert before is not None, f"the user cannot read {DOMAINNAME}"
    value = nonce("domain")
    writes = [(DOMAINNAME, value), ("/proc/sysrq-trigger", "h")]
    try:
        outcome = attack(shape, WRITE_FILES.format(writes=writes))
        after = shape.inside("read", DOMAINNAME)
        if not outcome.refused:
            changed = f"the snippet set the host's domain name:\n{outcome.describe()}"
            assert value not in (after or ""), changed
    finally:
        if value in (shape.inside("read", DOMAINNAME) or ""):
            shape.run(["sh", "-c", f"printf %s {before.strip()!r} > {DOMAINNAME}"])


READ_SHADOW = """
for path in ("/etc/shadow", "/etc/gshadow"):
    try:
        print(open(path).read())
    except OSError as exc:
        print(path, type(exc).__name__)
"""
#: A line of a shadow file (a user, a hash field, the day of its last change).
SHADOW_LINE = re.compile(r"^[a-z_][\w.-]*:[^:\n]*:\d*:", re.MULTILINE)


def test_the_snippet_cannot_read_what_only_root_may(shape: Shape) -> None:
    outcome = attack(shape, READ_SHADOW)
    if not outcome.refused:
        found = SHADOW_LINE.search(outcome.output)
        assert found is None, f"the snippet read /etc/shadow as root:\n{outcome.describe()}"


def test_nothing_persists_outside_the_run(shape: Shape) -> None:
    name = nonce("persist")
    targets = [f"/dev/shm/{name}", f"/tmp/{name}", f"/var/tmp/{name}"]
    outcome = attack(shape, WRITE_FILES.format(writes=[(path, "left") for path in targets]))
    try:
        if not outcome.refused:
            left = [path for path in targets if shape.inside("exists", path)]
            assert left == [], f"the run left {left} behind:\n{outcome.describe()}"
    finally:
        shape.run(["rm", "-f", *targets])


def test_output_is_capped(shape: Shape) -> None:
    outcome = attack(shape, "import sys\nsys.stdout.write('x' * 3_000_000)")
    if not outcome.refused:
        assert outcome.result["truncated"] is True, outcome.describe()
        assert len(outcome.result["stdout"]) <= 600_000, len(outcome.result["stdout"])


SPIN = """
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "while True: pass", {marker!r}])
while True:
    pass
"""


def test_cpu_past_the_timeout_is_stopped_with_every_process(shape: Shape) -> None:
    marker = nonce("spin")
    try:
        outcome = attack(shape, SPIN.format(marker=marker), timeout_sec=2)
        if not outcome.refused:
            assert outcome.result["timed_out"] is True, outcome.describe()
            left = still_running(shape, marker)
            assert left == [], f"alive after the timeout: {left}\n{outcome.describe()}"
    finally:
        shape.inside("kill", marker)


@pytest.fixture
def small_memory(shape: Shape) -> Iterator[int]:
    """The server's memory limit set to 64 MiB for one test (then set back)."""
    code, before = shape.api("GET", "api/sandbox/config")
    assert code == 200, before
    code, body = shape.api("PUT", "api/sandbox/config", {"memory_limit_mb": 64})
    assert code == 200, body
    yield 64
    shape.api("PUT", "api/sandbox/config", {"memory_limit_mb": before["memory_limit_mb"]})


ALLOCATE = """
block = bytearray({size} * 1024 * 1024)
for offset in range(0, len(block), 4096):
    block[offset] = 1
print("allocated", len(block))
"""


def test_memory_past_the_limit_fails_or_the_plan_says_it_is_not_capped(
    shape: Shape, small_memory: int
) -> None:
    outcome = attack(shape, ALLOCATE.format(size=4 * small_memory))
    if outcome.refused:
        return
    uncapped = [w for w in outcome.plan.get("warnings", []) if "not capped" in w.get("label", "")]
    if uncapped:
        assert uncapped[0]["severity"] == "high", uncapped
        return
    assert "allocated" not in outcome.output, f"256 MiB under a 64 MiB cap:\n{outcome.describe()}"
    assert outcome.result["exit_code"] != 0, outcome.describe()


LEAVE_IN_OUT = """
import os
open("out/ok.txt", "w").write("ok")
os.symlink("/etc/shadow", "out/shadow")
os.symlink("/etc", "out/etc")
os.mkfifo("out/pipe")
print("left")
"""


def test_out_hands_back_its_regular_files_and_follows_no_link(shape: Shape) -> None:
    # Rows 3 and 6 through files out: what comes back is the run's own, never the host's.
    outcome = attack(shape, LEAVE_IN_OUT)
    if outcome.refused:
        return
    result = outcome.result
    assert result["stdout"] == "left\n", outcome.describe()
    assert [f["name"] for f in result["files"]] == ["ok.txt"], outcome.describe()
    assert any("symlink (not followed)" in note for note in result["notes"]), result["notes"]
    assert any("(FIFO)" in note for note in result["notes"]), result["notes"]
    files = f"api/sandbox/runs/{result['run_id']}/files"
    assert shape.api("GET", f"{files}/ok.txt") == (200, "ok")
    status, body = shape.api("GET", f"{files}/shadow")
    assert status == 404, body
