"""Our /code/run script in a container made as Runner 0.1.0 makes them, on the real Docker engine.

The stand-in runs snippets as local processes; this runs the same script the backend
sends, inside ``docker run --rm --init --read-only --cap-drop ALL --security-opt
no-new-privileges --ipc none --network none --tmpfs /tmp:noexec`` as uid 1000 with the
job folder (mode 777) at ``/workspace``, under the Runner's step script: what the
real Runner does with a ``/code/run`` request (see docs/dev/matrixlab-runner.md).
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.matrixlab.protocol import BANNER
from gitpilot_jupyter.sandbox.matrixlab.wrapper import (
    Report,
    new_marker,
    read_report,
    snippet_script,
)
from tests.docker.conftest import BASE_IMAGE

pytestmark = pytest.mark.docker


def runner_run(
    engine: Any, job: Path, code: str, timeout: int, stdin: str | None = None
) -> tuple[int, str, str, Report | None]:
    """Run ``code`` as the Runner runs our /code/run script: (exit, stdout, stderr, report)."""
    marker = new_marker()
    # The base image has python3 only; the Runner's python image also has `python`.
    argv = ["python3", "$PWD/main.py"]
    ws, out = job / "ws", job / "out"
    ws.mkdir(parents=True)
    out.mkdir()
    (ws / "script.sh").write_text(
        snippet_script(code, "main.py", argv, timeout, marker, stdin=stdin is not None)
    )
    redirect = ""
    if stdin is not None:
        (ws / "stdin.txt").write_text(stdin)
        redirect = " < stdin.txt"
    for path in (job, ws, out, *ws.iterdir()):
        os.chmod(path, 0o777)
    step = "\n".join(
        [
            "set -euo pipefail",
            "mkdir -p /output",
            "export HOME=/workspace",
            "export OUTPUT_DIR=/output",
            'echo "== Matrix Lab step: command =="',
            f"cd {shlex.quote('.')}",
            f"bash script.sh{redirect}",
        ]
    )
    container = engine.containers.run(
        BASE_IMAGE,
        ["bash", "-lc", step],
        detach=True,
        init=True,
        read_only=True,
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        ipc_mode="none",
        network_mode="none",
        working_dir="/workspace",
        user="1000",
        pids_limit=64,
        mem_limit="256m",
        volumes={
            str(ws): {"bind": "/workspace", "mode": "rw"},
            str(out): {"bind": "/output", "mode": "rw"},
        },
        tmpfs={"/tmp": "rw,noexec,nosuid,size=256m"},
    )
    try:
        status = container.wait(timeout=timeout + 60)["StatusCode"]
        stdout = container.logs(stdout=True, stderr=False).decode()
        stderr = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    stderr, report = read_report(stderr, marker)
    return status, BANNER.sub("", stdout, count=1), stderr, report


@pytest.fixture
def engine(docker_engine: Any, test_images: None) -> Any:
    return docker_engine


def test_a_snippet_runs_byte_for_byte_in_a_clean_workspace(engine: Any, tmp_path: Path) -> None:
    code = "import os, sys\nprint(input()[::-1], sorted(os.listdir('.')))\nsys.exit(3)"
    status, stdout, stderr, report = runner_run(engine, tmp_path, code, 10, stdin="olleh\n")
    assert report is not None and (status, report.exit_code) == (3, 3)
    assert (stdout, stderr) == ("hello ['main.py']\n", "")
    assert (tmp_path / "ws" / "main.py").read_text() == code  # no newline added


def test_a_traceback_names_workspace_main_py(engine: Any, tmp_path: Path) -> None:
    _, _, stderr, report = runner_run(engine, tmp_path, "print('a')\n1 / 0", 10)
    assert report is not None and report.exit_code == 1
    assert 'File "/workspace/main.py", line 2' in stderr


def test_a_timeout_kills_the_snippet_and_keeps_its_output(engine: Any, tmp_path: Path) -> None:
    code = (
        "import sys, time, subprocess\nsubprocess.Popen(['sleep', '60'])\n"
        "print('before', flush=True)\nsys.stderr.write('err')\nsys.stderr.flush()\ntime.sleep(60)"
    )
    began = time.monotonic()
    status, stdout, stderr, report = runner_run(engine, tmp_path, code, 2)
    assert time.monotonic() - began < 30
    assert report is not None and report.timed_out(2) and status == report.exit_code
    # No "Killed" line from bash: only what the snippet wrote.
    assert (stdout, stderr) == ("before\n", "err")


def test_exit_124_and_timeout_on_stderr_are_not_timeouts(engine: Any, tmp_path: Path) -> None:
    code = "import sys\nsys.stderr.write('TIMEOUT')\nsys.exit(124)"
    status, _, stderr, report = runner_run(engine, tmp_path, code, 10)
    assert report is not None and status == 124 and not report.timed_out(10)
    assert stderr == "TIMEOUT"
