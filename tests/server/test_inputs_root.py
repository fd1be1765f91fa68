"""REST ``inputs`` named by absolute paths, as the CLI and ``%%sandbox`` send them, under a
root that itself lies below a hidden folder: only what is below the root counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.inputs import READ_BOTH, READ_BOTH_OUT, make_project

from .helpers import Api


@pytest.fixture
def jp_root_dir(tmp_path: Path) -> Path:
    return make_project(tmp_path / ".config" / "notebooks")


async def test_an_absolute_path_under_the_root_is_not_hidden(api: Api, jp_root_dir: Path) -> None:
    body = {
        "language": "python",
        "code": READ_BOTH,
        "inputs": [str(jp_root_dir / "sales.csv"), str(jp_root_dir / "data")],
    }
    answer = await api("POST", "api/sandbox/plan-and-run", body)
    assert answer.code == 200, answer.text
    assert answer.body["result"]["stdout"] == READ_BOTH_OUT
    (jp_root_dir / ".env").write_text("API_KEY=hunter2\n")
    hidden = await api("POST", "api/sandbox/plan", {**body, "inputs": [str(jp_root_dir / ".env")]})
    assert (hidden.code, hidden.body["code"]) == (400, "invalid_input")
    assert "hunter2" not in hidden.text
