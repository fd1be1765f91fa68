"""The service's sessions: a session's cell is planned, approved and run by its token,
in the session's real kernel (bwrap), and each identity drives only its own sessions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.errors import InvalidRequest, SessionNotFound
from gitpilot_jupyter.sandbox.request import Caller, RunOptions
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.service import SandboxService

from .conftest import make_backend

ALICE, BOB = Caller(user="alice"), Caller(user="bob")


def with_service(
    body: Callable[[SandboxService, list[tuple[str, dict[str, Any]]]], Awaitable[None]],
) -> None:
    """Run ``body`` with a service on the bwrap engine; it is closed after, as a server's is."""
    isolator = make_backend("bwrap").isolator
    events: list[tuple[str, dict[str, Any]]] = []

    async def main() -> None:
        service = SandboxService(
            isolator=isolator, audit=lambda kind, data: events.append((kind, data))
        )
        try:
            await body(service, events)
        finally:
            await service.aclose()
        assert service.sessions.list(ALICE) == [] and service.sessions.list(BOB) == []

    asyncio.run(main())


async def run_cell(service: SandboxService, caller: Caller, session: str, code: str) -> RunResult:
    """Plan, approve and run one cell of ``session`` by its token, as a face does."""
    options = RunOptions(language="python", code=code, session=session)
    plan = await service.plan(options, caller)
    token = (await service.approve(plan.plan_id, caller))["approval_token"]
    return await service.run(token, caller)


def test_a_sessions_cells_run_by_token_in_one_kernel_that_keeps_state() -> None:
    async def body(service: SandboxService, events: list[tuple[str, dict[str, Any]]]) -> None:
        first = await run_cell(service, ALICE, "nb", "import math\nx = 41")
        assert first.exit_code == 0
        second = await run_cell(service, ALICE, "nb", "print(x + 1, math.pi > 3)")
        assert (second.exit_code, second.stdout) == (0, "42 True\n")
        [info] = service.sessions.list(ALICE)
        assert (info["name"], info["cells"], info["owner"]) == ("nb", 2, "alice")
        runs = [data for kind, data in events if kind == "run"]
        assert [r["session"] for r in runs] == ["nb", "nb"]
        assert ("session", {"user": "alice", "action": "start", "name": "nb"}) in events
        # Restart clears the state; the session is still there.
        await service.sessions.restart("nb", ALICE)
        gone = await run_cell(service, ALICE, "nb", "print(x)")
        assert gone.exit_code != 0 and "NameError" in gone.stderr + gone.stdout

    with_service(body)


def test_another_identity_cannot_see_drive_or_stop_a_session() -> None:
    async def body(service: SandboxService, _: list[tuple[str, dict[str, Any]]]) -> None:
        await run_cell(service, ALICE, "nb", "secret = 'alice'")
        assert service.sessions.list(BOB) == []
        with pytest.raises(SessionNotFound):
            await service.sessions.stop("nb", BOB)
        with pytest.raises(SessionNotFound):
            await service.sessions.restart("nb", BOB)
        with pytest.raises(SessionNotFound):
            service.sessions.interrupt("nb", BOB)
        # Bob's cell of the same name opens his own session, apart from Alice's.
        bobs = await run_cell(service, BOB, "nb", "print('secret' in dir())")
        assert bobs.stdout == "False\n"
        alices = await run_cell(service, ALICE, "nb", "print(secret)")
        assert alices.stdout == "alice\n"
        await service.sessions.stop("nb", ALICE)
        assert [s["owner"] for s in service.sessions.list(BOB)] == ["bob"]
        assert service.sessions.list(ALICE) == []

    with_service(body)


def test_a_token_for_one_session_runs_there_only_and_a_bad_name_is_refused() -> None:
    async def body(service: SandboxService, _: list[tuple[str, dict[str, Any]]]) -> None:
        await service.sessions.start("a", ALICE, RunOptions())
        await run_cell(service, ALICE, "a", "here = 1")
        # The digest binds the session: the long form naming another session is refused.
        plan = await service.plan(
            RunOptions(language="python", code="print(here)", session="a"), ALICE
        )
        token = (await service.approve(plan.plan_id, ALICE))["approval_token"]
        other = RunOptions(language="python", code="print(here)", session="b")
        with pytest.raises(Exception) as refused:
            await service.run(token, ALICE, expected=other)
        assert getattr(refused.value, "code", "") == "approval_mismatch"
        assert [s["name"] for s in service.sessions.list(ALICE)] == ["a"]
        with pytest.raises(InvalidRequest):
            await service.sessions.start("../x", ALICE, RunOptions())

    with_service(body)
