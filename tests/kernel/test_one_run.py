"""Every face runs exactly the approved plan: the mappings "plan -> run arguments" are gone.

Each face used to turn a plan back into run arguments, and the copies disagreed
(one forgot the backend and the network, one sent a stdin the server never
returned, the service forgot the timeout clamp). Now a face approves and sends
the token alone. The server here allows at most 60 s while the saved default is
120 s, the case that made plan -> approve -> run fail with ``approval_mismatch``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.agents import AgentSandbox
from gitpilot_jupyter.client.base import SandboxClient
from gitpilot_jupyter.client.local import LocalClient
from gitpilot_jupyter.client.rest import RestClient
from gitpilot_jupyter.sandbox.policy import SandboxPolicy
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import ALLOWED_BACKENDS_ENV, SettingsStore
from gitpilot_jupyter.sandbox.sync import run_sync
from tests.support.live_server import LiveServer, start_live_server
from tests.unit.test_cli import cli

CLAMPED = 60


@pytest.fixture(scope="module")
def clamped_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real Jupyter server whose administrator allows at most 60 s per run, and ``off``."""
    live = start_live_server(
        tmp_path_factory.mktemp("clamped"),
        args=[f"--SandboxApp.max_timeout_sec={CLAMPED}"],
        env={ALLOWED_BACKENDS_ENV: "subprocess,off"},
    )
    yield live
    live.stop()


def clients(server: LiveServer) -> dict[str, SandboxClient]:
    local = SandboxService(
        settings=SettingsStore(server.config_dir), policy=SandboxPolicy(max_timeout_sec=CLAMPED)
    )
    return {"in-process": LocalClient(local), "REST": RestClient(server.url, server.token)}


@pytest.mark.parametrize("path", ["in-process", "REST"])
@pytest.mark.usefixtures("allow_off")
def test_kernel_clients_run_the_plan_as_planned(clamped_server: LiveServer, path: str) -> None:
    client = clients(clamped_server)[path]

    async def go() -> tuple[int, str, str]:
        # Default timeout (clamped), a stdin, an explicit backend other than the settings'.
        plan = await client.plan(
            RunOptions(
                language="py", code="print(input().upper())", stdin="from the plan\n", backend="off"
            )
        )
        result = await client.approve_and_run(plan)
        return plan.spec.timeout_sec, result.backend, result.stdout

    timeout, backend, stdout = run_sync(go())
    assert timeout == CLAMPED
    assert (backend, stdout) == ("off", "FROM THE PLAN\n")


@pytest.mark.parametrize("where", ["in-process", "REST"])
def test_agents_run_the_plan_as_planned(clamped_server: LiveServer, where: str) -> None:
    if where == "REST":
        agent = AgentSandbox(approval="auto", server=clamped_server.url, token=clamped_server.token)
    else:
        service = SandboxService(
            settings=SettingsStore(clamped_server.config_dir),
            policy=SandboxPolicy(max_timeout_sec=CLAMPED),
        )
        agent = AgentSandbox(approval="auto", service=service)
    reply = agent.run_in_sandbox("python", "print('agent ran')")
    assert reply.status == "completed", reply.text
    assert reply.plan is not None and reply.plan["timeout_sec"] == CLAMPED
    assert reply.result is not None and reply.result.stdout == "agent ran\n"


@pytest.mark.usefixtures("allow_off")
def test_cli_runs_the_plan_as_planned(tmp_path: Path) -> None:
    stdin = tmp_path / "stdin.txt"
    stdin.write_text("typed\n", encoding="utf-8")
    code = "print(input().upper())"
    done = cli("run", "python", "-c", code, "--stdin", str(stdin), "--backend", "off", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "TYPED\n" and "off" in done.stderr
