"""Hostile input never yields a 500; a broken settings file or a vanished client breaks nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from gitpilot_jupyter.server.schemas import openapi_document

from .helpers import NDJSON, Api, plan_and_approve

NASTY: list[Any] = [
    None,
    True,
    -1,
    10**30,
    1.5,
    float("inf"),
    "",
    "\x00",
    "../" * 20 + "etc/passwd",
    "%s%n%x",
    "é" * 5000,
    [],
    {"nested": {"deeper": [1, 2]}},
]

#: (method, path, request schema, a valid body to start from)
WRITES = [
    ("POST", "api/sandbox/plan", "PlanRequest", {"language": "python", "code": "print(1)"}),
    ("POST", "api/sandbox/approve", "ApproveRequest", {"plan_id": "plan_0000000000000000"}),
    ("POST", "api/sandbox/run", "RunRequest", {"language": "python", "code": "print(1)"}),
    # (bash: a nasty code that runs prints no Python traceback of its own)
    ("POST", "api/sandbox/plan-and-run", "PlanAndRunRequest", {"language": "bash", "code": "1"}),
    ("PUT", "api/sandbox/config", "SettingsUpdate", {}),
    ("POST", "api/sandbox/matrixlab/test", "MatrixlabTestRequest", {}),
    ("POST", "api/sandbox/batch/plan", "BatchPlanRequest", {"items": [{"id": 1, "code": "1"}]}),
    ("POST", "api/sandbox/batch/approve", "BatchApproveRequest", {"batch_id": "batch_0"}),
    ("POST", "api/sandbox/batch", "BatchRunRequest", {"batch_id": "batch_0"}),
]


async def test_no_field_value_makes_a_500(api: Api, jp_root_dir: Path) -> None:
    schemas = openapi_document()["components"]["schemas"]
    seen: set[int] = set()
    for method, path, schema, valid in WRITES:
        for field in schemas[schema]["properties"]:
            if path.endswith("matrixlab/test") and field == "matrixlab_url":
                continue  # a valid-looking URL would make a real connection attempt
            for value in NASTY:
                body = {**valid, field: value}
                raw = json.dumps(body).encode()  # float("inf") goes out as Infinity
                answer = await api(method, path, raw=raw)
                seen.add(answer.code)
                assert answer.code < 500, (path, field, value, answer.text)
                assert "Traceback" not in answer.text
    assert 400 in seen and 200 in seen


async def test_deeply_nested_json_is_a_400(api: Api) -> None:
    answer = await api("POST", "api/sandbox/plan", raw=b"[" * 100_000)
    assert (answer.code, answer.body["code"]) == (400, "malformed_json")


async def test_corrupt_settings_file_is_reported_not_fatal(
    api: Api, sandbox_config_dir: Path
) -> None:
    (sandbox_config_dir / "settings.json").write_text("{ not json")
    status = await api("GET", "api/sandbox/status")
    assert status.code == 200 and status.body["settings_error"]
    assert status.body["backend"] == "subprocess"
    saved = await api("PUT", "api/sandbox/config", {"timeout_sec": 33})
    assert saved.code == 200 and saved.body["settings_error"] is None
    assert list(sandbox_config_dir.glob("settings.json.bad-*"))


async def test_stream_respects_the_output_cap(api: Api) -> None:
    code = "import sys\nsys.stdout.write('x' * 700_000)\nprint('tail')"
    _, token = await plan_and_approve(api, language="python", code=code)
    body = {"language": "python", "code": code, "approval_token": token}
    answer = await api("POST", "api/sandbox/run", body, headers={"Accept": NDJSON})
    lines = answer.body
    streamed = "".join(line["data"] for line in lines if line["type"] == "stdout")
    result = lines[-1]
    assert len(streamed.encode()) == 512_000 and result["truncated"] is True
    assert result["stdout"] == streamed and "tail" not in streamed


async def test_a_client_that_leaves_mid_stream_stops_its_run_and_breaks_nothing(
    api: Api, jp_serverapp: Any, http_server_client: Any, jp_http_port: int, jp_base_url: str
) -> None:
    code = "import time\nprint('go', flush=True)\ntime.sleep(1.5)\nprint('done')"
    _, token = await plan_and_approve(api, language="python", code=code)
    finished: list[dict[str, Any]] = []

    async def on_run(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        finished.append(data)

    run_schema = "https://schema.jupyter.org/gitpilot_jupyter/sandbox/run/v1"
    jp_serverapp.event_logger.add_listener(schema_id=run_schema, listener=on_run)
    payload = json.dumps({"language": "python", "code": code, "approval_token": token})
    auth = jp_serverapp.identity_provider.token
    request = (
        f"POST {jp_base_url}api/sandbox/run HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: token {auth}\r\nAccept: {NDJSON}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n{payload}"
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", jp_http_port)
    writer.write(request.encode())
    await writer.drain()
    first = await asyncio.wait_for(reader.readuntil(b"go"), timeout=30)
    assert b"200 OK" in first
    writer.close()  # gone while the snippet sleeps: the user pressed Stop

    for _ in range(100):
        if finished:
            break
        await asyncio.sleep(0.1)
    # The run was stopped (not left to run unseen), and still audited.
    assert finished and finished[0]["cancelled"] is True and finished[0]["exit_code"] == -1
    # The server still answers.
    assert (await api("GET", "api/sandbox/status")).code == 200
