"""The warm pool of a server and of the CLI: reported, and closed with the server;
none kept for one command unless asked."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local import cgroups
from gitpilot_jupyter.sandbox.local.cgroups import run_prefix
from gitpilot_jupyter.sandbox.local.pool import POOL_ENV
from tests.support.live_server import start_live_server
from tests.support.system import require_system

from .conftest import require_mechanism
from .pooling import (
    rest_run,
)


def test_the_server_reports_its_pool_and_closes_it_with_itself(tmp_path: Path) -> None:
    require_mechanism("bwrap")
    server = start_live_server(
        tmp_path,
        env={POOL_ENV: ""},
        args=["--SandboxApp.pool=auto", "--SandboxApp.pool_max_slots=3"],
    )
    try:
        with server.client() as http:
            report = http.get("/api/sandbox/status").json()["pool"]
            require_system("bwrap", report["active"], f"no pool here: {report['reason']}")
            # Started with the server (pool_prewarm: python): even the first run is warm.
            deadline = time.monotonic() + 30
            results = []
            for _ in range(3):
                while (pool := http.get("/api/sandbox/status").json()["pool"])["idle"] < 2:
                    assert time.monotonic() < deadline, pool
                    time.sleep(0.05)
                results.append(rest_run(http, "print(6 * 7)"))
            while (pool := http.get("/api/sandbox/status").json()["pool"])["idle"] < 2:
                assert time.monotonic() < deadline, pool  # the last one's slot is replaced
                time.sleep(0.05)
        assert [(r["stdout"], r["warm"]) for r in results] == [("42\n", True)] * 3
        assert pool["mode"] == "auto" and pool["active"] and pool["max_slots"] == 3
        assert (pool["hits"], pool["misses"]) == (3, 0)
        # The waiting slots: bubblewrap children of the server, each in its run folder.
        # (/proc lists a child under the thread that started it: the pool's are workers.)
        tasks = Path(f"/proc/{server.pid}/task").glob("*/children")
        children = [pid for task in tasks for pid in task.read_text().split()]
        slots = {
            int(pid): os.readlink(f"/proc/{pid}/cwd")
            for pid in children
            if b"bwrap" in Path(f"/proc/{pid}/cmdline").read_bytes()
        }
        assert len(slots) >= 2, "no waiting sandbox under the server"
        prefix = run_prefix(server.pid)
    finally:
        server.stop()
    # SIGTERM: the server stopped its extension, which closed the pool.
    for pid, folder in slots.items():
        assert not Path(f"/proc/{pid}").exists(), f"slot {pid} outlived the server"
        assert not Path(folder).exists(), f"{folder} outlived the server"
    # cgroups.detect, not _cgroup_tree: that removes a gone server's empty cgroups itself.
    tree, _ = cgroups.detect()
    for parent in (tree.memory_parent, tree.pids_parent) if tree is not None else ():
        if parent is not None:
            assert not list(parent.glob(f"{prefix}*"))


def test_the_cli_keeps_no_pool_for_one_command_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gitpilot_jupyter.cli.commands import make_client

    monkeypatch.delenv(POOL_ENV, raising=False)
    assert make_client().service.backends.subprocess.pool_config.mode == "off"
    assert make_client(pool="auto").service.backends.subprocess.pool_config.mode == "auto"
    monkeypatch.setenv(POOL_ENV, "always")
    assert make_client().service.backends.subprocess.pool_config.mode == "always"
