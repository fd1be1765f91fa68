"""A batch goes through the one door: to the server when the face goes there.

``%sandbox batch`` in a kernel whose cells run on a Jupyter server, and
``jupyter sandbox batch --server URL``, plan, approve and run the batch on that
server (its policy refuses and clamps the items, its request log shows the batch
routes), not in the calling process.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from jupyter_client.blocking import BlockingKernelClient

from gitpilot_jupyter.sandbox.batch import read_results
from tests.batch.test_cli import BIN
from tests.kernel import test_in_kernel
from tests.kernel.test_in_kernel import messages_until_idle
from tests.kernel.test_kernel_path import printed, requests_after
from tests.support.live_server import LiveServer, start_live_server

#: A real kernel with the extension loaded.
kernel = test_in_kernel.kernel

#: The server's longest timeout: the kernel's own core would allow 120 s.
SERVER_MAX_TIMEOUT_SEC = 7


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server with a policy of its own and a log of every request it answers."""
    live = start_live_server(
        tmp_path_factory.mktemp("strict"),
        args=[
            "--ServerApp.log_level=DEBUG",
            f"--SandboxApp.max_timeout_sec={SERVER_MAX_TIMEOUT_SEC}",
        ],
    )
    yield live
    live.stop()


def test_a_kernels_batch_runs_on_the_server_its_cells_go_to(
    kernel: BlockingKernelClient, strict: LiveServer
) -> None:
    printed(
        kernel,
        f"%config SandboxMagics.server = {strict.url!r}\n"
        f"%config SandboxMagics.server_token = {strict.token!r}\n"
        "items = [{'id': 'a', 'language': 'python', 'code': 'print(6 * 7)'},\n"
        "         {'id': 'b', 'language': 'bash', 'code': 'rm -rf /'}]",
    )
    # The server's policy decides: a timeout over its maximum is refused (the kernel's own
    # core allows 60 s), and the default timeout is clamped to its maximum.
    refused = run(kernel, "%sandbox batch items --timeout 60")
    assert f"timeout_sec must be between 1 and {SERVER_MAX_TIMEOUT_SEC}" in refused, refused
    mark = len(strict.log())
    out = printed(kernel, "r = %sandbox batch items\nprint(r.set_index('id').loc['a', 'stdout'])")
    assert f"timeout {SERVER_MAX_TIMEOUT_SEC} s" in out, out
    assert out.rstrip().endswith("42"), out
    # Planned, approved (the cell's execution) and run on the server, the blocked item unrun.
    assert requests_after(strict, mark, 3) == [
        "POST batch/plan",
        "POST batch/approve",
        "POST batch",
    ]
    status = printed(kernel, "print(sorted(r['status']))")
    assert status.split() == ["['blocked',", "'ok']"]


def test_the_cli_runs_a_batch_on_the_server_it_names(strict: LiveServer, tmp_path: Path) -> None:
    items = tmp_path / "items.jsonl"
    given = [("a", "print(6 * 7)"), ("b", "print('b')"), ("c", "print('c')")]
    items.write_text(
        "".join(json.dumps({"id": i, "language": "python", "code": c}) + "\n" for i, c in given)
    )
    out = tmp_path / "results.jsonl"
    env = {**os.environ, "GITPILOT_JUPYTER_TOKEN": strict.token}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [str(BIN), "batch", str(items), "--out", str(out), "--server", strict.url]
        return subprocess.run(
            [*command, "--yes", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
        )

    refused = cli("--timeout", "60")  # the server's policy, not this process's
    assert refused.returncode == 2, refused.stderr
    assert f"between 1 and {SERVER_MAX_TIMEOUT_SEC}" in refused.stderr
    mark = len(strict.log())
    ran = cli()
    assert ran.returncode == 0, ran.stderr
    assert f"timeout {SERVER_MAX_TIMEOUT_SEC} s" in ran.stderr
    ran_first = {r["id"]: r["stdout"] for r in read_results(out)}
    assert ran_first == {"a": "42\n", "b": "b\n", "c": "c\n"}
    assert requests_after(strict, mark, 3) == [
        "POST batch/plan",
        "POST batch/approve",
        "POST batch",
    ]
    # Resume as after a stop before b finished: the server runs the approved batch without
    # the items the results file holds (no second plan and approval of the rest).
    out.write_text("".join(line for line in out.read_text().splitlines(True) if '"b"' not in line))
    mark = len(strict.log())
    again = cli()
    assert again.returncode == 0 and "3 ok (2 already done)" in again.stderr, again.stderr
    assert sorted((r["id"], r["stdout"]) for r in read_results(out)) == sorted(ran_first.items())
    assert requests_after(strict, mark, 3) == [
        "POST batch/plan",
        "POST batch/approve",
        "POST batch",
    ]


def run(kernel: BlockingKernelClient, code: str) -> str:
    """Everything a cell printed (stdout and stderr)."""
    msg_id = kernel.execute(code)
    return "".join(
        m["content"].get("text", "")
        for m in messages_until_idle(kernel, msg_id)
        if m["msg_type"] == "stream"
    )
