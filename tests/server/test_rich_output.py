"""Display outputs over REST: the plan states their caps, NDJSON streams each as a
``display`` line as it happens, the envelope ends with them in ``outputs``, and hostile
outputs give notes, never a 500."""

from __future__ import annotations

import json
from typing import Any

import httpx

from gitpilot_jupyter.sandbox.rich import DisplayCaps

from .helpers import NDJSON, Api, approved_run, check_stream_line, plan_and_approve

CODE = """
import sys
print("text")
display({"text/html": "<b>x</b><script>alert(1)</script>", "text/plain": "x"}, raw=True)
display({"image/png": "%%%"}, raw=True)
for n in range(600):
    display(n)
sys.stdout.write("tail")
{"last": True}
"""


async def test_outputs_stream_as_display_lines_and_end_in_the_envelope(
    api: Api, http_server_client: Any, jp_http_port: int, jp_base_url: str,
    jp_auth_header: dict[str, str],
) -> None:  # fmt: skip
    planned, token = await plan_and_approve(api, language="python", code=CODE)
    assert {"label": DisplayCaps().describe(), "ok": True} in planned["checks"]
    body = {"language": "python", "code": CODE, "approval_token": token}
    lines = []
    async with (
        httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{jp_http_port}{jp_base_url}",
            headers=jp_auth_header,
            timeout=60,
        ) as http,
        http.stream("POST", "api/sandbox/run", json=body, headers={"Accept": NDJSON}) as answer,
    ):
        assert answer.status_code == 200
        async for text in answer.aiter_lines():
            if text.strip():
                line = json.loads(text)
                check_stream_line(line, "RunResult")
                lines.append(line)
    displayed = [line["data"] for line in lines if line["type"] == "display"]
    result = lines[-1]
    assert result["type"] == "result" and result["exit_code"] == 0, result
    assert result["stdout"] == "text\ntail"
    assert result["outputs"] == displayed  # the same items, in the same order
    assert len(displayed) == 500
    html = displayed[0]
    assert html["data"]["text/html"] == "<b>x</b><script>alert(1)</script>"  # data, as sent
    assert html["stdout_at"] == len("text\n")
    assert result["notes"] == [
        "1 display output dropped: image/png is not valid base64",
        "102 display outputs dropped: a run keeps at most 500 (max_display_outputs)",
    ]


async def test_the_json_envelope_carries_the_outputs(api: Api) -> None:
    answer = await approved_run(api, "python", "print('a')\n6 * 7")
    assert answer.code == 200, answer.text
    assert answer.body["stdout"] == "a\n"
    assert answer.body["outputs"] == [
        {"output_type": "display_data", "data": {"text/plain": "42"}, "metadata": {},
         "stdout_at": 2}
    ]  # fmt: skip
