"""The magic in a real ipykernel: output lands in its cell, the card runs on a frontend click.

The click is sent the way JupyterLab sends it: a ``comm_msg`` to the Button's
model with ``{"method": "custom", "content": {"event": "click"}}``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.blocking import BlockingKernelClient
from jupyter_client.manager import start_new_kernel

from tests.support.live_server import LiveServer

TIMEOUT = 60


@pytest.fixture
def kernel() -> Iterator[BlockingKernelClient]:
    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=TIMEOUT)
    try:
        run(kc, "%load_ext gitpilot_jupyter\n%config SandboxMagics.server = 'local'")
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def messages_until_idle(kc: BlockingKernelClient, msg_id: str) -> list[dict[str, Any]]:
    """Every iopub message caused by ``msg_id`` (any parent) until that request is idle."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=TIMEOUT)
        seen.append(msg)
        if (
            msg["parent_header"].get("msg_id") == msg_id
            and msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
        ):
            return seen
    raise AssertionError("the kernel did not go idle")


def run(kc: BlockingKernelClient, code: str) -> list[dict[str, Any]]:
    return messages_until_idle(kc, kc.execute(code))


def streams(messages: list[dict[str, Any]], parent: str, name: str = "stdout") -> str:
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream"
        and m["content"]["name"] == name
        and m["parent_header"].get("msg_id") == parent
    )


def test_streamed_output_belongs_to_its_cell(kernel: BlockingKernelClient) -> None:
    code = "%%sandbox\nimport sys, time\nprint('one', flush=True)\ntime.sleep(0.3)\n"
    code += "print('two', file=sys.stderr, flush=True)\nprint('three')"
    msg_id = kernel.execute(code)
    messages = messages_until_idle(kernel, msg_id)
    out, err = streams(messages, msg_id), streams(messages, msg_id, "stderr")
    assert out.startswith("one\nthree\n") and "[sandbox] subprocess · exit 0" in out
    assert err == "two\n"
    orphans = [m for m in messages if m["msg_type"] == "stream"]
    assert all(m["parent_header"].get("msg_id") == msg_id for m in orphans)


def test_the_card_runs_on_a_frontend_click(kernel: BlockingKernelClient) -> None:
    msg_id = kernel.execute("%%sandbox --out r\nimport subprocess\nprint('approved by a click')")
    messages = messages_until_idle(kernel, msg_id)
    assert streams(messages, msg_id) == ""
    assert any(m["msg_type"] == "display_data" for m in messages)

    ids_cell = kernel.execute(
        "m = [c for c in get_ipython().configurables if type(c).__name__ == 'SandboxMagics'][0]\n"
        "print(m.card.approve_button.model_id, m.card.output.model_id, m.card.consent.model_id)"
    )
    button, output, tick_box = streams(messages_until_idle(kernel, ids_cell), ids_cell).split()

    def click_approve() -> list[dict[str, Any]]:
        click = kernel.session.msg(
            "comm_msg",
            {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}},
        )
        kernel.shell_channel.send(click)
        return messages_until_idle(kernel, click["header"]["msg_id"])

    # A high-risk plan: a click before the tick box runs nothing.
    early = click_approve()
    assert not any(
        m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == output for m in early
    ), "one click must not approve a high-risk plan"
    tick = kernel.session.msg(
        "comm_msg",
        {"comm_id": tick_box, "data": {"method": "update", "state": {"value": True}}},
    )
    kernel.shell_channel.send(tick)
    messages_until_idle(kernel, tick["header"]["msg_id"])

    click = kernel.session.msg(
        "comm_msg",
        {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}},
    )
    kernel.shell_channel.send(click)
    updates = messages_until_idle(kernel, click["header"]["msg_id"])
    outputs: list[dict[str, Any]] = []
    for m in updates:
        if m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == output:
            state = m["content"]["data"].get("state", {})
            outputs = state.get("outputs", outputs)
    shown = "".join(o.get("text", "") for o in outputs)
    assert shown.startswith("approved by a click\n")
    assert "[sandbox] subprocess · exit 0" in shown

    check = kernel.execute("import json; print(json.dumps(r))")
    assert json.loads(streams(messages_until_idle(kernel, check), check))["exit_code"] == 0

    again = kernel.session.msg(
        "comm_msg",
        {"comm_id": button, "data": {"method": "custom", "content": {"event": "click"}}},
    )
    kernel.shell_channel.send(again)
    later = messages_until_idle(kernel, again["header"]["msg_id"])
    assert not any(
        m["msg_type"] == "comm_msg" and m["content"]["comm_id"] == output for m in later
    ), "a second click must not run the snippet again"


@pytest.mark.parametrize("path", ["in-process", "REST"])
def test_interrupting_the_kernel_stops_the_snippet(
    kernel: BlockingKernelClient, path: str, request: pytest.FixtureRequest
) -> None:
    from jupyter_client.manager import KernelManager

    from tests.server.test_cancel import appears, new_marker, processes_with

    if path == "REST":
        live: LiveServer = request.getfixturevalue("server")
        run(
            kernel,
            f"%config SandboxMagics.server = {live.url!r}\n"
            f"%config SandboxMagics.server_token = {live.token!r}",
        )
    marker = new_marker()
    code = "%%sandbox --yes --timeout 60 --out r\nimport subprocess, time\n"
    code += f"subprocess.Popen(['sleep', '{marker}'])\nprint('started', flush=True)\n"
    code += "time.sleep(2)\nprint('still alive', flush=True)\ntime.sleep(60)"
    msg_id = kernel.execute(code)
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + TIMEOUT
    while "started" not in streams(seen, msg_id) and time.monotonic() < deadline:
        seen.append(kernel.get_iopub_msg(timeout=TIMEOUT))
    assert appears(marker), "the snippet's child should be running"
    started = time.monotonic()
    km: KernelManager = kernel.parent
    km.interrupt_kernel()
    seen += messages_until_idle(kernel, msg_id)
    errors = [m["content"] for m in seen if m["msg_type"] == "error"]
    # One short line, no traceback of the machinery (sync.py, threading.py).
    assert len(errors) == 1 and errors[0]["ename"] == "SandboxStopped"
    (line,) = errors[0]["traceback"]
    assert line.startswith("SandboxStopped: stopped after ") and "the snippet was killed" in line
    assert f"({path})" in line
    assert time.monotonic() - started < 20
    # Killed where it ran (the server, on the REST path), not only forgotten by the kernel.
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(marker)
    time.sleep(2.5)  # long enough for the snippet to print again, were it still running
    while True:
        try:
            seen.append(kernel.get_iopub_msg(timeout=0.5))
        except Exception:
            break
    assert "still alive" not in "".join(
        m["content"].get("text", "") for m in seen if m["msg_type"] == "stream"
    )
    # The envelope says so, and the kernel goes on.
    check = kernel.execute("print(r['cancelled'], r['exit_code'], r['stdout'].strip())")
    assert streams(messages_until_idle(kernel, check), check) == "True -1 started\n"
    # The next cell runs on the same path (the connection the stopped run used is not reused).
    after = kernel.execute("%%sandbox\nprint('after the stop')")
    assert streams(messages_until_idle(kernel, after), after).startswith("after the stop\n")
