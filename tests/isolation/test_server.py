"""Through a real Jupyter server: a fork bomb and a memory hog leave it responsive and fine."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import Any

import pytest

from gitpilot_jupyter.server.base import SERVICE_KEY
from tests.server.conftest import api, jp_server_config, openapi
from tests.server.helpers import approved_run

from .conftest import marked_processes
from .test_limits import FORK_BOMB, HOG

__all__ = ["api", "jp_server_config", "openapi"]


async def test_fork_bomb_and_memory_hog_leave_the_server_fine(
    api: Any, jp_serverapp: Any, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Passed to the runs by name (the administrator lists it): leftovers can be found.
    named = f"RUN_{mark}"
    monkeypatch.setenv(named, "1")
    service = jp_serverapp.web_app.settings[SERVICE_KEY]
    service.policy = dataclasses.replace(service.policy, caller_vars=frozenset({named}))
    answer = await api("PUT", "api/sandbox/config", {"max_processes": 16, "memory_limit_mb": 96})
    assert answer.code == 200, answer.text
    layers = answer.body["isolation"]
    if not {"cgroup-pids", "rlimit-nproc"} & set(layers):
        pytest.skip(f"no process limit here: {answer.body['isolation_report']['unavailable']}")
    bomb = asyncio.ensure_future(approved_run(api, "python", FORK_BOMB, timeout_sec=3, env=[named]))
    await asyncio.sleep(1.0)
    started = time.monotonic()
    status = await api("GET", "api/sandbox/status")
    assert status.code == 200 and time.monotonic() - started < 2.5  # still responsive
    result = (await bomb).body
    assert result["timed_out"] and result["stdout"].startswith("bomb")
    assert [p for p in marked_processes(mark) if p != os.getpid()] == []
    if "cgroup-memory" in layers:
        hog = (await approved_run(api, "python", HOG, env=[named])).body
        assert "memory limit exceeded" in hog["stderr"] and hog["exit_code"] != 0
    after = (await approved_run(api, "python", "print('next run')")).body
    assert (after["exit_code"], after["stdout"]) == (0, "next run\n")
