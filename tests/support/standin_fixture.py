"""Pytest fixtures that run the Runner stand-in as a real HTTP server process.

The root ``tests/conftest.py`` registers this module as a plugin, so every test
can ask for them (pytest refuses ``pytest_plugins`` in a non-root conftest):

* ``runner_standin``: a healthy Runner with a bearer token; has ``.url`` and ``.token``.
* ``start_standin``: a factory, ``start_standin(mode="slow", token="", delay=3.0, port=0,
  args=())``, for the modes and options listed in :mod:`tests.support.runner_standin`.

Every process started is killed at teardown.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_SEC = 30
#: The temp state folders :func:`launch_standin` makes (and removes).
STATE_PREFIX = "standin-state-"


@dataclass
class StandinRunner:
    """A running stand-in: where it listens and the token it expects ('' = none)."""

    url: str
    token: str
    mode: str
    process: subprocess.Popen[str]
    #: Its ``MATRIXLAB_STATE_DIR``: where it keeps its copies of each run, as the real Runner.
    state_dir: Path

    @property
    def port(self) -> int:
        """The loopback port it listens on."""
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        """Kill the process (idempotent)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stdout is not None:
            self.process.stdout.close()
        if self.state_dir.name.startswith(STATE_PREFIX):
            shutil.rmtree(self.state_dir, ignore_errors=True)


def launch_standin(
    mode: str = "ok", token: str = "", delay: float = 3.0, port: int = 0, args: Sequence[str] = ()
) -> StandinRunner:
    """Start ``python -m tests.support.runner_standin`` on ``port`` (0: a free loopback port);
    ``args``: more of its options (``--workers``, ``--docker-image``...).

    Its state folder is ``MATRIXLAB_STATE_DIR`` when the test set one, else a temp
    folder removed at :meth:`StandinRunner.stop` (not ``runner_state`` in the checkout).
    """
    env = dict(os.environ)
    if not env.get("MATRIXLAB_STATE_DIR"):
        env["MATRIXLAB_STATE_DIR"] = tempfile.mkdtemp(prefix=STATE_PREFIX)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.runner_standin",
            "--port",
            str(port),
            "--mode",
            mode,
            "--token",
            token,
            "--delay",
            str(delay),
            *args,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    # The first line names the URL once the socket listens; readline blocks until then.
    line = process.stdout.readline().strip()
    if not line.startswith("listening on "):
        process.kill()
        process.wait(timeout=START_TIMEOUT_SEC)
        raise RuntimeError(f"the Runner stand-in did not start: {line!r}")
    url = line.split(" ", 2)[2]
    state = Path(env["MATRIXLAB_STATE_DIR"])
    return StandinRunner(url=url, token=token, mode=mode, process=process, state_dir=state)


StartStandin = Callable[..., StandinRunner]


@pytest.fixture
def start_standin() -> Iterator[StartStandin]:
    """Factory of stand-in Runners; all of them are killed at teardown."""
    started: list[StandinRunner] = []

    def start(
        mode: str = "ok",
        token: str = "",
        delay: float = 3.0,
        port: int = 0,
        args: Sequence[str] = (),
    ) -> StandinRunner:
        runner = launch_standin(mode=mode, token=token, delay=delay, port=port, args=args)
        started.append(runner)
        return runner

    yield start
    for runner in started:
        runner.stop()


@pytest.fixture
def runner_standin(start_standin: StartStandin) -> StandinRunner:
    """A healthy stand-in Runner that requires a bearer token (``.url``, ``.token``)."""
    return start_standin(mode="ok", token="standin-" + secrets.token_urlsafe(12))
