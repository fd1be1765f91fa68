"""``GET /api/sandbox/runs/{run_id}/files/{name}``: a run's out/ files, for its owner only.

A real server with two real users (an identity provider with names): Alice's snippet
writes ``out/chart.csv``; her result lists it with its size and sha256, and the route
gives her its bytes as a download. Bob, who knows the run id, gets the same 404 as for
a run that never was. 100,000 tiny files stop at the count cap while the server goes
on answering.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from .helpers import Api
from .test_auth import XSRF, HeaderIdentityProvider, server_config

XSRF_HEADERS = {"Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF}
ALICE = {"X-Test-User": "alice", **XSRF_HEADERS}
BOB = {"X-Test-User": "bob", **XSRF_HEADERS}
CHART = b"month,sales\n1,10\n2,12\n"
PAGE = b"<script>alert(1)</script>"
WRITE = {
    "language": "python",
    "code": f"import os\nos.makedirs('out/plots')\nopen('out/chart.csv', 'wb').write({CHART!r})\n"
    f"open('out/plots/page.html', 'wb').write({PAGE!r})",
}


@pytest.fixture
def jp_server_config() -> Any:
    config = server_config()
    config.ServerApp.identity_provider_class = HeaderIdentityProvider
    return config


async def fetch_file(jp_fetch: Any, run_id: str, name: str, who: dict[str, str]) -> Any:
    return await jp_fetch(
        "api", "sandbox", "runs", run_id, "files", *name.split("/"), headers=who, raise_error=False
    )


async def alices_run(api: Api) -> dict[str, Any]:
    answer = await api("POST", "api/sandbox/plan-and-run", WRITE, headers=ALICE)
    assert answer.code == 200, answer.text
    result: dict[str, Any] = answer.body["result"]
    assert result["exit_code"] == 0, result["stderr"]
    return result


async def test_the_owner_downloads_a_listed_file(api: Api, jp_fetch: Any) -> None:
    result = await alices_run(api)
    assert {f["name"]: (f["size"], f["sha256"]) for f in result["files"]} == {
        "chart.csv": (len(CHART), "sha256:" + hashlib.sha256(CHART).hexdigest()),
        "plots/page.html": (len(PAGE), "sha256:" + hashlib.sha256(PAGE).hexdigest()),
    }
    got = await fetch_file(jp_fetch, result["run_id"], "chart.csv", ALICE)
    assert got.code == 200 and got.body == CHART
    assert got.headers["Content-Type"] == "text/csv; charset=utf-8"
    assert got.headers["Content-Disposition"].startswith('attachment; filename="chart.csv"')
    assert got.headers["X-Content-Type-Options"] == "nosniff"
    # HTML a snippet wrote is a download too, never a page of the server's origin.
    page = await fetch_file(jp_fetch, result["run_id"], "plots/page.html", ALICE)
    assert page.code == 200 and page.headers["Content-Disposition"].startswith("attachment;")
    assert page.headers["X-Content-Type-Options"] == "nosniff"


async def test_another_user_gets_what_an_unknown_run_gets(api: Api, jp_fetch: Any) -> None:
    result = await alices_run(api)
    theirs = await fetch_file(jp_fetch, result["run_id"], "chart.csv", BOB)
    unknown = await fetch_file(jp_fetch, "run_0123456789abcdef", "chart.csv", ALICE)
    missing = await fetch_file(jp_fetch, result["run_id"], "nothing.csv", ALICE)
    for answer in (theirs, unknown, missing):
        assert answer.code == 404 and b"run_file_not_found" in answer.body
    assert CHART not in theirs.body


@pytest.mark.parametrize(
    "name", ["..%2Fchart.csv", "plots%2F..%2F..%2Fchart.csv", "%2Fetc%2Fpasswd"]
)
async def test_names_that_leave_out_are_refused(api: Api, jp_fetch: Any, name: str) -> None:
    result = await alices_run(api)
    answer = await jp_fetch(
        "api", "sandbox", "runs", result["run_id"], "files", name, headers=ALICE, raise_error=False
    )
    assert answer.code in (400, 404), answer.body
    assert CHART not in answer.body


async def test_many_tiny_files_stop_at_the_cap_and_the_server_answers(api: Api) -> None:
    code = "for i in range(100_000):\n    with open(f'out/f{i}', 'wb') as f:\n        f.write(b'.')"
    body = {"language": "python", "code": code, "timeout_sec": 120}
    answer = await api("POST", "api/sandbox/plan-and-run", body, headers=ALICE)
    assert answer.code == 200, answer.text
    result = answer.body["result"]
    if result["exit_code"] != 0:
        # The run's writable space (256 MiB, 16,384 inodes by default) filled first:
        # what it wrote until then still stops at the cap.
        assert "No space left" in result["stderr"] or "memory" in result["stderr"]
    assert len(result["files"]) == 1000
    assert "out/: stopped at the cap of 1000 files: the rest was left out" in result["notes"]
    status = await api("GET", "api/sandbox/status", headers=ALICE)
    assert status.code == 200
