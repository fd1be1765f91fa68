"""The warm pool: a run through a slot is a cold run started early, and used once.

Each test looks at what a snippet sees or what is left on the host, with real
bubblewrap slots; the containment suite runs every attack through the pool too.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.results import RunResult
from tests.support.system import require_system

from .pooling import (
    PATH,
    own_uids_named,
    pooled,
    request,
    scenario,
    the_pool,
    until,
    waiting_slot,
)

SEES = r"""
import os, sys
print("uid", os.getuid(), os.getgroups(), "argv", sys.argv, "file", __file__)
print("stdin", os.readlink("/proc/self/fd/0"), "fds", sorted(os.listdir("/proc/self/fd")))
print("here", sorted(os.listdir(".")), "tmp", os.listdir("/tmp"), "shm", os.listdir("/dev/shm"))
print("me", open(__file__).read() == CODE)
print("procs", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
"""
SEES = "CODE = open(__file__).read()\n" + SEES


def test_a_warm_run_sees_exactly_what_a_cold_run_sees() -> None:
    cold_and_warm: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        cold_and_warm.append(await backend.run(request(SEES)))
        await until(lambda: the_pool(backend).idle() >= 1)
        cold_and_warm.append(await backend.run(request(SEES)))

    scenario(body, pooled())
    cold, warm = cold_and_warm
    assert (cold.warm, warm.warm) == (False, True)
    assert cold.exit_code == warm.exit_code == 0, warm.stderr

    # uid, groups, argv, the snippet file, stdin /dev/null, no extra fd, an empty run
    # folder and /tmp (but for the run folder's own mount point there, named per run),
    # the pid namespace: all the same, line by line.
    def same(text: str) -> str:
        return own_uids_named(re.sub(r"gitpilot-sandbox-\w+", "gitpilot-sandbox-X", text))

    assert same(warm.stdout) == same(cold.stdout)
    if os.geteuid() == 0:  # each run (and slot) a host uid of its own
        assert cold.stdout.split()[1] != warm.stdout.split()[1], (cold.stdout, warm.stdout)
    assert "stdin /dev/null" in warm.stdout and "me True" in warm.stdout
    assert warm.isolation == cold.isolation and "seccomp" in warm.isolation


def test_nothing_of_a_run_is_visible_to_the_next() -> None:
    leave = (
        "import os, subprocess\n"
        "for path in ('left.txt', '/tmp/left.txt', '/dev/shm/left.txt'):\n"
        "    open(path, 'w').write('secret')\n"
        "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "print(os.getpid())\n"
    )
    look = (
        "import os\n"
        "print(sorted(os.listdir('.')), os.listdir('/tmp'), os.listdir('/dev/shm'))\n"
        "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        for code in (leave, look):
            results.append(await backend.run(request(code)))

    scenario(body, pooled("always"))
    first, second = results
    assert first.warm and second.warm and first.exit_code == 0, first.stderr
    # (/tmp holds only the run folder's mount point, named after this run's folder; the
    # run folder its own copy of matplotlib's font list, when the interpreter has matplotlib.)
    assert re.fullmatch(
        r"\[(?:'\.matplotlib', )?'inline.py', 'out'\] \['gitpilot-sandbox-\w+'\] \[\]",
        second.stdout.splitlines()[0],
    )
    # Its own pid namespace: the interpreter and bubblewrap's init, no sleeper of the first.
    assert second.stdout.splitlines()[1] == "[1, 2]"


def test_a_slot_serves_only_runs_of_its_own_key() -> None:
    show = (
        "import os, resource\n"
        "print(os.environ.get('GP_KEY'), resource.getrlimit(resource.RLIMIT_FSIZE)[0])"
    )
    bigger = ResourceLimits(memory_mb=96, max_processes=32, max_file_size_mb=9)
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        results.append(await backend.run(request(show, env={**PATH, "GP_KEY": "one"})))
        await until(lambda: pool.idle() >= 1)
        results.append(await backend.run(request(show, env={**PATH, "GP_KEY": "two"})))
        results.append(
            await backend.run(request(show, env={**PATH, "GP_KEY": "one"}, limits=bigger))
        )
        results.append(await backend.run(request(show, env={**PATH, "GP_KEY": "one"})))

    scenario(body, pooled())
    assert [(r.stdout.split(), r.warm) for r in results] == [
        (["one", str(8 * 2**20)], False),
        (["two", str(8 * 2**20)], False),  # another environment: not the waiting slot
        (["one", str(9 * 2**20)], False),  # other limits: not it either
        (["one", str(8 * 2**20)], True),
    ]


def test_stdin_is_dev_null_unless_text_is_given() -> None:
    code = "import os, sys; print(os.readlink('/proc/self/fd/0')[:5], repr(sys.stdin.read()))"
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        results.append(await backend.run(request(code)))
        results.append(await backend.run(request(code, stdin="two\nlines")))
        results.append(await backend.run(request(code, stdin="x" * 300_000)))

    scenario(body, pooled("always"))
    assert all(r.warm for r in results)
    assert results[0].stdout == "/dev/ ''\n"
    assert results[1].stdout == "pipe: 'two\\nlines'\n"
    assert results[2].stdout == f"pipe: {'x' * 300_000!r}\n"


def test_big_code_reaches_a_warm_slot_whole() -> None:
    code = "# " + "x" * 600_000 + "\nprint(len(open(__file__).read()))\n"
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        results.append(await backend.run(request(code)))

    scenario(body, pooled("always"))
    assert results[0].warm and results[0].stdout == f"{len(code)}\n", results[0].stderr


def test_a_credential_folder_made_after_the_slot_started_stays_hidden() -> None:
    # The folder must lie in a tree the run sees for hiding to matter: the interpreter's.
    folder = Path(sys.prefix) / f".gitpilot-test-{secrets.token_hex(4)}"
    if not os.access(sys.prefix, os.W_OK):
        pytest.skip("the interpreter's folder is not writable by this user")
    environ = {**os.environ, "GITPILOT_CONFIG_DIR": str(folder)}
    read = f"print(open({str(folder / 'token')!r}).read())"
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        results.append(await backend.run(request("print('warming')")))
        await until(lambda: pool.idle() >= 1)
        folder.mkdir()
        (folder / "token").write_text("s3cret")
        results.append(await backend.run(request(read)))
        results.append(await backend.run(request("print('again')")))
        assert pool.stats["stale"] >= 1

    try:
        scenario(body, pooled(environ=environ))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert "s3cret" not in results[1].stdout + results[1].stderr
    assert results[1].exit_code != 0 and not results[1].warm  # the old slots were dropped


def test_timeout_and_stop_are_those_of_a_cold_run() -> None:
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        slow = request("import time\nprint('started', flush=True)\ntime.sleep(60)")
        slow.timeout_sec = 1
        results.append(await backend.run(slow))
        stop = asyncio.Event()
        stopped = request("import time\nprint('started', flush=True)\ntime.sleep(60)", stop=stop)
        asyncio.get_running_loop().call_later(1.0, stop.set)
        results.append(await backend.run(stopped))

    started = time.monotonic()
    scenario(body, pooled("always"))
    timed_out, cancelled = results
    assert timed_out.warm and timed_out.timed_out and timed_out.exit_code == -1
    assert cancelled.warm and cancelled.cancelled and not cancelled.timed_out
    assert timed_out.stdout == cancelled.stdout == "started\n"
    assert time.monotonic() - started < 30


def _namespace_fds() -> list[str]:
    """The namespaces this process holds open (``mnt:[...]``), by their fds' targets."""
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if re.fullmatch(r"mnt:\[\d+\]", target):
            held.append(target)
    return held


def test_a_waiting_slot_holds_its_mount_namespaces_and_lets_go_after_its_run() -> None:
    """The server keeps a slot's mount namespaces (the staging one of its chain and
    the sandbox's) so their teardown is not in the run's exit; the hold ends with the
    run (no descriptor or namespace is left behind)."""
    seen: dict[str, Any] = {}

    async def body(backend: SubprocessSandbox) -> None:
        slot = await waiting_slot(backend)
        require_system(
            "nsfs access to the run's namespaces",
            len(slot.mount_ns) == 2,
            "this host does not let the server open its runs' /proc/PID/ns/mnt (ptrace "
            "access, e.g. Yama ptrace_scope 2): runs then unmount theirs in their exit",
        )
        seen["held"] = [os.readlink(f"/proc/self/fd/{fd}") for fd in slot.mount_ns]
        seen["chain"] = os.readlink(f"/proc/{slot.popen.pid}/ns/mnt")
        seen["own"] = os.readlink("/proc/self/ns/mnt")
        result = await backend.run(request("import os; print(os.readlink('/proc/self/ns/mnt'))"))
        assert result.warm and result.exit_code == 0, result
        seen["run"] = result.stdout.strip()
        await asyncio.sleep(0)  # the removal is handed over once the answer is out
        await asyncio.to_thread(backend.after_runs.wait)
        seen["after"] = slot.mount_ns

    scenario(body, pooled(max_slots=1))
    assert seen["own"] not in seen["held"], "a held namespace is the server's own"
    assert seen["held"] == [seen["chain"], seen["run"]], (
        "the holds are not on the chain's and the run's namespaces"
    )
    assert seen["chain"] != seen["run"]
    assert seen["after"] == ()
    for held in seen["held"]:
        assert held not in _namespace_fds(), "still held after the pool closed"
