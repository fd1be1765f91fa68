"""A session's cell: its approval binds the session, and it never runs as a run of its own."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib

import pytest

from gitpilot_jupyter.sandbox.errors import InvalidRequest
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.sessions import check_name
from gitpilot_jupyter.sandbox.spec import RunSpec

CELL = RunSpec(
    language="python",
    code="x = 1",
    stdin=None,
    timeout_sec=30,
    network=False,
    backend="subprocess",
    session="nb",
)


def test_the_digest_binds_the_session_and_a_run_without_one_keeps_its_digest() -> None:
    other = dataclasses.replace(CELL, session="other")
    plain = dataclasses.replace(CELL, session=None)
    assert len({CELL.digest, other.digest, plain.digest}) == 3
    # The digest a plan without a session always had (from before sessions existed).
    material = (
        b'{"backend": "subprocess", "code": "x = 1", "language": "python", '
        b'"network": false, "stdin": null, "timeout_sec": 30}'
    )
    assert plain.digest == "sha256:" + hashlib.sha256(material).hexdigest()


def test_an_approved_cell_is_refused_as_a_run_of_its_own(service: SandboxService) -> None:
    # The service sends a session's cell to its kernel; the plain executor, handed one,
    # refuses it rather than run it in a fresh process that lacks the session's state.
    async def main() -> None:
        plan = await service.plan(RunOptions(language="python", code="x = 1", session="nb"))
        assert plan.spec.session == "nb" and plan.options().session == "nb"
        with pytest.raises(InvalidRequest) as refused:
            await service.executor.execute(
                plan.spec, plan_id=plan.plan_id, user=None, on_output=None
            )
        assert refused.value.code == "session_cell"

    asyncio.run(main())


@pytest.mark.parametrize("name", ["", "-a", "a/b", "a b", "x" * 65, None, "..x"])
def test_a_bad_session_name_is_refused(name: object) -> None:
    with pytest.raises(InvalidRequest):
        check_name(name)


def test_a_good_session_name_is_kept() -> None:
    assert check_name("notebook-1.v2_a") == "notebook-1.v2_a"
