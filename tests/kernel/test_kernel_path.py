"""The kernel's path to the sandbox lives across cells: one loop, one connection.

A kernel's ``%%sandbox`` cells run their coroutines on one long-lived event loop
(:func:`gitpilot_jupyter.sandbox.sync.run_sync`), so what lives on it survives from
cell to cell: the REST path keeps one connection to the server, and the in-process
path's warm pool keeps its timers (idle slots retire while the kernel sits idle).
"""

from __future__ import annotations

import asyncio
import contextvars
import http.server
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from jupyter_client.blocking import BlockingKernelClient

from gitpilot_jupyter.client.rest import RestClient
from gitpilot_jupyter.client.server import ServerInfo, auth_headers, call_api
from gitpilot_jupyter.sandbox.sync import run_sync, shared_loop
from tests.kernel import test_in_kernel
from tests.kernel.test_in_kernel import messages_until_idle, streams
from tests.support.live_server import LiveServer, start_live_server
from tests.support.system import require_system

#: A real kernel with the extension loaded (its path set by each test).
kernel = test_in_kernel.kernel


def printed(kc: BlockingKernelClient, code: str) -> str:
    msg_id = kc.execute(code)
    messages = messages_until_idle(kc, msg_id)
    errors = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert not errors, errors
    return streams(messages, msg_id)


def test_cells_reuse_one_connection_to_the_server(
    kernel: BlockingKernelClient, server: LiveServer
) -> None:
    port = int(server.url.rsplit(":", 1)[1].strip("/"))
    printed(
        kernel,
        f"%config SandboxMagics.server = {server.url!r}\n"
        f"%config SandboxMagics.server_token = {server.token!r}\n"
        "import psutil, json\n"
        f"def to_server():\n"
        f"    return sorted(c.laddr.port for c in psutil.Process().net_connections('tcp')\n"
        f"                  if c.raddr and c.raddr.port == {port} and c.status == 'ESTABLISHED')",
    )
    seen = []
    for i in range(3):
        out = printed(kernel, f"%%sandbox\nprint('cell {i}')")
        assert out.startswith(f"cell {i}\n") and "· REST" in out
        seen.append(json.loads(printed(kernel, "print(json.dumps(to_server()))")))
    # The requests of three cells went over the same single connection.
    assert len(seen[0]) == 1, seen
    assert seen == [seen[0]] * 3


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real server that logs every request it answers (jupyter_server's debug level)."""
    live = start_live_server(
        tmp_path_factory.mktemp("logged"), args=["--ServerApp.log_level=DEBUG"]
    )
    yield live
    live.stop()


def requests_after(server: LiveServer, mark: int, expected: int) -> list[str]:
    """The sandbox requests the server answered since ``mark`` (a log offset), as
    ``METHOD route``; waits until ``expected`` are logged (the line follows the answer)."""
    deadline = time.monotonic() + 10
    while True:
        log = Path(server.log_path).read_text(encoding="utf-8", errors="replace")[mark:]
        # jupyter_server's request log: "200 POST /api/sandbox/run (user@ip) 3.21ms".
        line = r"\] \d{3} (GET|POST|PUT|DELETE) /api/sandbox/(\S+) \([^)]*@[^)]*\) [\d.]+ms"
        found = re.findall(line, log)
        if len(found) >= expected or time.monotonic() > deadline:
            return [f"{method} {route}" for method, route in found]
        time.sleep(0.1)


def test_a_cell_is_one_request_and_a_card_waits_for_its_click(
    kernel: BlockingKernelClient, logged: LiveServer
) -> None:
    printed(
        kernel,
        f"%config SandboxMagics.server = {logged.url!r}\n"
        f"%config SandboxMagics.server_token = {logged.token!r}\n"
        "m = [c for c in get_ipython().configurables if type(c).__name__ == 'SandboxMagics'][0]",
    )
    mark = len(logged.log())
    out = printed(kernel, "%%sandbox\nprint('one trip')")
    assert out.startswith("one trip\n") and "· REST" in out
    # Planned, approved (the cell's execution) and run in one round trip.
    assert requests_after(logged, mark, 1) == ["POST plan-and-run"]

    # A high warning: the one request leaves it pending and unrun; the card shows.
    mark = len(logged.log())
    msg_id = kernel.execute("%%sandbox --out r\nimport subprocess\nprint('looked at')")
    messages = messages_until_idle(kernel, msg_id)
    assert streams(messages, msg_id) == ""
    assert any(m["msg_type"] == "display_data" for m in messages)
    assert printed(kernel, "print(m.card.state, 'r' in dir())").split() == ["pending", "False"]
    assert requests_after(logged, mark, 1) == ["POST plan-and-run"]
    # Approved on the card: the usual approve, then the run.
    mark = len(logged.log())
    printed(kernel, "m.card.consent.value = True; m.card.approve_button.click()")
    assert requests_after(logged, mark, 2) == ["POST approve", "POST run"]
    shown = printed(kernel, "print(''.join(o.get('text', '') for o in m.card.output.outputs))")
    assert shown.startswith("looked at\n")
    assert printed(kernel, "print(r['exit_code'])").strip() == "0"

    # Blocked: one request, a one-line error, nothing ran.
    mark = len(logged.log())
    msg_id = kernel.execute("%%sandbox bash\nrm -rf /")
    errors = [m["content"] for m in messages_until_idle(kernel, msg_id) if m["msg_type"] == "error"]
    assert [e["ename"] for e in errors] == ["SandboxBlocked"]
    assert "nothing ran" in errors[0]["evalue"] and "rm -rf /" in errors[0]["evalue"]
    assert requests_after(logged, mark, 1) == ["POST plan-and-run"]


def test_idle_slots_retire_while_the_kernel_waits(kernel: BlockingKernelClient) -> None:
    # The pool's timer lives on the loop the cells' runs use: a loop made and closed
    # per call (as before) lost it, and idle slots stayed until the next run.
    printed(
        kernel,
        "from gitpilot_jupyter.client.local import LocalClient\n"
        "from gitpilot_jupyter.sandbox.local.pool import PoolConfig\n"
        "m = [c for c in get_ipython().configurables if type(c).__name__ == 'SandboxMagics'][0]\n"
        "m._client = LocalClient(pool=PoolConfig(mode='auto', min_slots=0, idle_sec=1.0))\n"
        "backend = m._client.service.backends.subprocess\n"
        "print(backend.pool_error() or '')",
    )
    reason = printed(kernel, "print(backend.pool_error() or '')").strip()
    require_system("bwrap", not reason, f"no warm pool here: {reason}")
    assert printed(kernel, "%%sandbox\nprint('one')").startswith("one\n")
    report = "import json; print(json.dumps(backend.pool_report()))"
    deadline = time.monotonic() + 15
    states = [json.loads(printed(kernel, report))]
    while time.monotonic() < deadline and states[-1]["idle"] + states[-1]["starting"] == 0:
        time.sleep(0.2)  # the refill after the run
        states.append(json.loads(printed(kernel, report)))
    assert states[-1]["idle"] + states[-1]["starting"] > 0, "the run's refill never came"
    deadline = time.monotonic() + 20  # the pool looks every 5 s; idle for 1 s retires
    while time.monotonic() < deadline and states[-1]["idle"] + states[-1]["starting"] > 0:
        time.sleep(0.5)
        states.append(json.loads(printed(kernel, report)))
    assert states[-1]["idle"] + states[-1]["starting"] == 0, states[-1]
    # And the next cell still runs (cold now: the pool holds nothing).
    assert printed(kernel, "%%sandbox\nprint('two')").startswith("two\n")


def test_a_servers_login_cookie_is_not_kept(server: LiveServer) -> None:
    # A server answers the token with a login cookie. Kept by the kept-alive client, it
    # would go to any other server on the host (cookies ignore ports).
    answer = httpx.get(f"{server.url}/api/sandbox/status", headers=auth_headers(server.token))
    assert answer.headers.get("set-cookie"), "the server should answer with a login cookie"
    seen: list[str] = []

    class Other(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(str(self.headers))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:
            pass

    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=other.serve_forever, daemon=True).start()

    async def cell() -> None:
        run_sync(RestClient(server.url, server.token).status())
        elsewhere = ServerInfo(f"http://127.0.0.1:{other.server_address[1]}/", "", "test")
        run_sync(call_api(elsewhere, "GET", "status"))

    try:
        asyncio.run(cell())
    finally:
        other.shutdown()
        other.server_close()
    assert len(seen) == 1 and "cookie" not in seen[0].lower(), seen


def test_calls_from_a_running_loop_share_one_loop_and_keep_their_context() -> None:
    name: contextvars.ContextVar[str] = contextvars.ContextVar("name", default="")

    async def where() -> tuple[int, str, str]:
        loop = asyncio.get_running_loop()
        return id(loop), threading.current_thread().name, name.get()

    async def cell(label: str) -> tuple[int, str, str]:
        name.set(label)
        return run_sync(where())

    first = asyncio.run(cell("first"))
    second = asyncio.run(cell("second"))
    assert first[0] == second[0] == id(shared_loop())
    assert first[1] == second[1] != threading.current_thread().name
    assert (first[2], second[2]) == ("first", "second")


def test_a_call_made_on_the_shared_loop_does_not_wait_for_itself() -> None:
    # Sync code called from a coroutine on the shared loop (an agent tool's sync face
    # inside an async tool) runs on a loop of its own instead of deadlocking.
    async def inner() -> str:
        return threading.current_thread().name

    async def outer() -> tuple[str, str]:
        return threading.current_thread().name, run_sync(inner(), on_interrupt=asyncio.sleep)

    async def cell() -> tuple[str, str]:
        return run_sync(outer())

    shared, nested = asyncio.run(cell())
    assert shared != nested


def test_errors_and_interrupts_raised_by_the_coroutine_reach_the_caller() -> None:
    async def fails() -> None:
        raise ValueError("bad input")

    async def interrupted() -> None:
        raise KeyboardInterrupt

    async def cell() -> None:
        with pytest.raises(ValueError, match="bad input"):
            run_sync(fails())
        with pytest.raises(KeyboardInterrupt):
            run_sync(interrupted())
        assert run_sync(asyncio.sleep(0, result="the loop goes on")) == "the loop goes on"

    asyncio.run(cell())
