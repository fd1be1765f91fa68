"""NDJSON streaming of a run, and a server that stays responsive while snippets run."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from .helpers import NDJSON, Api, check_stream_line, plan_and_approve

SLOW = "import sys, time\nprint('first', flush=True)\ntime.sleep({sleep})\nprint('second')\n"


@pytest.fixture
def client(
    http_server_client: Any, jp_http_port: int, jp_base_url: str, jp_auth_header: dict[str, str]
) -> httpx.AsyncClient:
    """A real HTTP client with room for many concurrent requests (use it in ``async with``).

    ``http_server_client`` makes the server listen on ``jp_http_port``.
    """
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{jp_http_port}{jp_base_url}",
        headers=jp_auth_header,
        timeout=60,
        limits=httpx.Limits(max_connections=64),
    )


async def stream_run(
    http: httpx.AsyncClient, body: dict[str, Any]
) -> AsyncIterator[tuple[float, dict[str, Any]]]:
    """POST /run asking for NDJSON; yield (arrival time, line) as each line arrives."""
    headers = {"Accept": NDJSON}
    async with http.stream("POST", "api/sandbox/run", json=body, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith(NDJSON)
        async for text in response.aiter_lines():
            if text.strip():
                line = json.loads(text)
                check_stream_line(line, "RunResult")
                yield time.monotonic(), line


async def test_ndjson_delivers_output_before_the_snippet_ends(
    api: Api, client: httpx.AsyncClient
) -> None:
    code = SLOW.format(sleep=3)
    _, token = await plan_and_approve(api, language="python", code=code)
    body = {"language": "python", "code": code, "approval_token": token}
    async with client:
        lines = [item async for item in stream_run(client, body)]
    kinds = [line["type"] for _, line in lines]
    # Chunks are cut where the pipe delivered them, not necessarily at line ends.
    assert kinds[0] == "stdout" and lines[0][1]["data"].startswith("f")
    assert kinds[-1] == "result"
    # The first line came while the snippet still slept.
    assert lines[-1][0] - lines[0][0] > 2.0
    result = lines[-1][1]
    assert result["exit_code"] == 0 and result["stdout"] == "first\nsecond\n"


async def test_ndjson_errors_before_the_run_are_plain_json(api: Api) -> None:
    body = {"language": "python", "code": "print(1)"}
    answer = await api("POST", "api/sandbox/run", body, headers={"Accept": NDJSON})
    assert answer.code == 403
    assert answer.headers["Content-Type"].startswith("application/json")
    assert answer.body["code"] == "approval_required"


async def test_ndjson_streams_stderr_and_failures(api: Api) -> None:
    code = "import sys\nsys.stderr.write('bad\\n')\nraise SystemExit(4)"
    _, token = await plan_and_approve(api, language="python", code=code)
    body = {"language": "python", "code": code, "approval_token": token}
    answer = await api("POST", "api/sandbox/run", body, headers={"Accept": NDJSON})
    assert answer.code == 200
    lines = answer.body
    for line in lines:
        check_stream_line(line, "RunResult")
    assert "".join(line["data"] for line in lines if line["type"] == "stderr") == "bad\n"
    assert lines[-1]["type"] == "result" and lines[-1]["exit_code"] == 4


@pytest.mark.parametrize("jp_server_config", [{"require_approval": False}], indirect=True)
async def test_status_answers_promptly_while_16_snippets_sleep(
    client: httpx.AsyncClient,
) -> None:
    count = 16
    started: asyncio.Queue[None] = asyncio.Queue()
    finished: list[float] = []

    async def one(index: int) -> dict[str, Any]:
        body = {"language": "python", "code": SLOW.format(sleep=8) + f"# {index}\n"}
        result: dict[str, Any] = {}
        seen: list[dict[str, Any]] = []
        async for _, line in stream_run(client, body):
            if line["type"] == "stdout" and not seen:
                seen.append(line)
                started.put_nowait(None)
            if line["type"] == "result":
                result = line
                finished.append(time.monotonic())
        return result

    async with client:
        runs = [asyncio.create_task(one(i)) for i in range(count)]
        for _ in range(count):
            await asyncio.wait_for(started.get(), timeout=60)
        # All 16 are sleeping now.
        before = time.monotonic()
        status = await client.get("api/sandbox/status")
        elapsed = time.monotonic() - before
        assert status.status_code == 200
        assert not finished, "a snippet ended before status was asked; the test proves nothing"
        assert elapsed < 2.0, f"GET /status took {elapsed:.2f} s while snippets slept"
        results = await asyncio.gather(*runs)
    assert [r["exit_code"] for r in results] == [0] * count
