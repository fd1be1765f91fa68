"""The warm pool: a run through a slot is a cold run started early, and used once.

Each test looks at what a snippet sees or what is left on the host, with real
bubblewrap slots; the containment suite runs every attack through the pool too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures.thread
import gc
import os
import re
import secrets
import shutil
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.local import cgroups, nsfree
from gitpilot_jupyter.sandbox.local.backends import NullSandbox, SubprocessSandbox
from gitpilot_jupyter.sandbox.local.cgroups import run_prefix
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator, _cgroup_tree
from gitpilot_jupyter.sandbox.local.pool import POOL_ENV, PoolConfig, Slot, WarmPool
from gitpilot_jupyter.sandbox.local.pool import refill as pool_module
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.sync import run_sync
from tests.support.live_server import start_live_server
from tests.support.system import require_system

from .conftest import SMALL, require_mechanism

PATH = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def pooled(
    mode: str = "auto", *, environ: dict[str, str] | None = None, **config: Any
) -> SubprocessSandbox:
    """A bwrap backend with a pool of its own."""
    require_mechanism("bwrap")
    isolator = LayeredIsolator("bwrap", environ=environ)
    backend = SubprocessSandbox(isolator=isolator, pool=PoolConfig(mode=mode, **config))
    require_system("bwrap", backend.pool_error() is None, f"no pool here: {backend.pool_error()}")
    return backend


def request(code: str, **extra: Any) -> RunRequest:
    extra.setdefault("env", dict(PATH))
    extra.setdefault("limits", SMALL)
    return RunRequest(language=extra.pop("language", "python"), code=code, timeout_sec=20, **extra)


def the_pool(backend: SubprocessSandbox) -> WarmPool:
    pool = backend.pool()
    assert pool is not None
    return pool


async def waiting_slot(backend: SubprocessSandbox) -> Slot:
    """A slot of a python ``pass`` run's key, started and waiting (one run made it)."""
    pool = the_pool(backend)
    await backend.run(request("pass"))
    await until(lambda: pool.idle() >= 1)
    return next(s for q in pool._idle.values() for s in q)


async def until(check: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "the pool did not get there in time"
        await asyncio.sleep(0.05)


def scenario(
    body: Callable[[SubprocessSandbox], Awaitable[None]], backend: SubprocessSandbox
) -> None:
    """Run ``body`` on one loop and close the pool afterwards, whatever happened."""

    async def main() -> None:
        try:
            await body(backend)
        finally:
            await backend.aclose()

    asyncio.run(main())


def own_uids_named(text: str) -> str:
    """``text`` with the uids of a root server's runs (each its own) as ``RUN-UID``."""
    low, high = nsfree.RUN_UID_BASE, nsfree.RUN_UID_BASE + nsfree.RUN_UID_COUNT
    return re.sub(r"\b\d{10}\b", lambda m: "RUN-UID" if low <= int(m[0]) < high else m[0], text)


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
    # (/tmp holds only the run folder's mount point, named after this run's folder.)
    assert re.fullmatch(
        r"\['inline.py'\] \['gitpilot-sandbox-\w+'\] \[\]", second.stdout.splitlines()[0]
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


def test_the_pool_follows_demand_within_its_limits() -> None:
    seen: list[int] = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await until(lambda: pool.idle() >= 2)  # one run at a time: two waiting
        await asyncio.sleep(0.5)
        seen.append(pool.idle() + pool.starting())
        runs = [backend.run(request("import time; time.sleep(1)")) for _ in range(5)]
        results = await asyncio.gather(*runs)
        assert sum(r.warm for r in results) >= 2
        await until(lambda: pool.idle() >= 3)  # five at once: as many as the cap allows
        await asyncio.sleep(0.5)
        seen.append(pool.idle() + pool.starting())

    scenario(body, pooled(max_slots=3, min_slots=1))
    assert seen == [2, 3]


def test_runs_one_after_another_keep_more_slots_waiting() -> None:
    """Runs back to back take slots faster than one refill makes them: the pool keeps
    as many as began within one slot's start time (one at a time would be peak + 1)."""
    wanted: list[int] = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await until(lambda: pool.idle() >= 2)
        key = next(iter(pool._idle))
        # Measured from the slots' real starts; then set long, so that the eight runs
        # below all began within one start time however slow this machine is today.
        assert 0 < pool._ready_sec < 5
        pool._ready_sec = 60.0
        for _ in range(8):
            await backend.run(request("pass"))
        wanted.append(pool.target(key))
        pool._ready_sec = 0.001  # a start time long past: the rate counts none of them
        wanted.append(pool.target(key))

    scenario(body, pooled(max_slots=6, min_slots=1))
    assert wanted[0] == 6, wanted  # 8 runs + 1, within pool_max_slots
    assert wanted[1] == 2, wanted  # one at a time: peak + 1


def test_the_refill_waits_for_the_answer_unless_a_run_needs_a_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slot's start takes the GIL and a core: after a run it waits (REFILL_DELAY_SEC,
    # made long here) so the answer reaches the caller first. A run that finds no idle
    # slot ends the wait at once, and closing the pool during it starts nothing.
    monkeypatch.setattr(pool_module, "REFILL_DELAY_SEC", 60.0)
    # The pool's periodic look (every 5 s) also refills, without the delay: on a loaded
    # machine the first slots can take that long, and the look then fell inside a run.
    monkeypatch.setattr(pool_module, "_TICK_SEC", 3600.0)
    backend = pooled(max_slots=2, min_slots=1)
    started: list[float] = []

    def counted(key: Any) -> Any:
        started.append(time.monotonic())
        return SubprocessSandbox._spawn_slot(backend, key)

    backend._spawn_slot = counted  # type: ignore[method-assign]

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))  # a miss: its slots start at once
        await until(lambda: pool.idle() >= 2)
        before = len(started)
        assert (await backend.run(request("pass"))).warm  # one slot left idle
        await asyncio.sleep(0.3)
        assert (pool.idle(), pool.starting(), len(started)) == (1, 1, before)
        assert (await backend.run(request("pass"))).warm  # takes the last one
        await until(lambda: pool.idle() >= 2)  # well before the 60 s delay
        assert len(started) == before + 2
        assert (await backend.run(request("pass"))).warm
        assert pool.starting() == 0  # queued for once the answer is out: the next turn
        await asyncio.sleep(0)
        assert pool.starting() == 1
        closing = time.monotonic()
        await backend.aclose()
        assert time.monotonic() - closing < 10
        assert (pool.idle(), pool.starting(), len(started)) == (0, 0, before + 2)

    scenario(body, backend)


def test_closing_leaves_no_process_cgroup_or_folder() -> None:
    slots: list[Any] = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await asyncio.gather(*(backend.run(request("pass")) for _ in range(3)))
        await until(lambda: pool.idle() >= 3)
        slots.extend(s for q in pool._idle.values() for s in q)
        for slot in slots:  # each waiting slot's own cgroup folders (memory, pids)
            cgroup_dirs.extend(slot.launch._cgroup.dirs if slot.launch._cgroup else [])

    cgroup_dirs: list[Path] = []
    scenario(body, pooled(max_slots=4))
    assert len(slots) >= 3
    for slot in slots:
        assert slot.popen.returncode is not None
        with pytest.raises(ProcessLookupError):
            os.kill(slot.popen.pid, 0)
        assert not slot.workdir.exists()
    if _cgroup_tree()[0] is not None:
        assert cgroup_dirs and not [d for d in cgroup_dirs if d.exists()]


def test_a_run_ending_as_the_interpreter_shuts_down_starts_nothing_and_raises_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a run's answer come its refill and removal; once the interpreter is shutting
    down (a CLI stopped by Ctrl-C) no thread can start: no slot starts, the removal is
    done at once, and nothing raises in the event loop."""
    errors: list[dict[str, Any]] = []
    seen: list[tuple[str, bool, int]] = []

    async def body(backend: SubprocessSandbox) -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: errors.append(ctx))
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await until(lambda: pool.idle() >= 1 and not pool.starting())
        monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)
        try:
            result = await backend.run(request("print(1)"))
            await asyncio.sleep(0.2)  # its refill and removal have had their turn
        finally:
            monkeypatch.setattr(concurrent.futures.thread, "_shutdown", False)
        seen.append((result.stdout, result.warm, pool.starting()))

    scenario(body, pooled(max_slots=1))
    assert seen == [("1\n", True, 0)]
    assert errors == []


def test_pool_off_and_where_it_cannot_work() -> None:
    require_mechanism("bwrap")
    off = SubprocessSandbox(isolator=LayeredIsolator("bwrap"), pool=PoolConfig(mode="off"))
    assert off.pool() is None and off.pool_error() == "turned off (pool = off)"
    result = asyncio.run(off.run(request("print(1)")))
    assert (result.stdout, result.warm) == ("1\n", False)
    unshare = SubprocessSandbox(isolator=LayeredIsolator("unshare"), pool=PoolConfig())
    assert unshare.pool() is None and "bubblewrap" in str(unshare.pool_error())
    assert NullSandbox(pool=PoolConfig()).pool() is None


def test_the_pool_is_on_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(POOL_ENV, raising=False)
    require_mechanism("bwrap")
    backend = SubprocessSandbox(isolator=LayeredIsolator("bwrap"))
    assert backend.pool_config.mode == "auto"
    require_system("bwrap", backend.pool_error() is None, f"no pool here: {backend.pool_error()}")
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        results.append(await backend.run(request("print(1)")))
        await until(lambda: the_pool(backend).idle() >= 1)
        results.append(await backend.run(request("print(1)")))

    scenario(body, backend)
    assert [r.warm for r in results] == [False, True]


def test_a_backend_dropped_without_closing_takes_its_slots_along() -> None:
    backend = pooled(max_slots=2)
    slots: list[Any] = []

    async def body(mine: SubprocessSandbox) -> None:
        await mine.run(request("pass"))
        pool = the_pool(mine)
        await until(lambda: pool.idle() >= 2)
        slots.extend(s for q in pool._idle.values() for s in q)

    asyncio.run(body(backend))  # no aclose(): the loop is gone, the slots wait
    del backend
    gc.collect()
    for slot in slots:
        with pytest.raises(ProcessLookupError):
            os.kill(slot.popen.pid, 0)
        assert not slot.workdir.exists()


def test_closing_inside_the_pools_own_lock_does_not_hang() -> None:
    # The backend's finalizer closes its pool; a garbage-collection pass may run it in a
    # thread that holds the pool's lock at that moment (a refill, the tick).
    pool = the_pool(pooled(max_slots=1))
    closed = threading.Event()

    def collected_while_locked() -> None:
        with pool._lock:
            pool.close_now()
        closed.set()

    threading.Thread(target=collected_while_locked, daemon=True).start()
    assert closed.wait(30), "close_now deadlocked on the pool's own lock"


def rest_run(http: Any, code: str) -> dict[str, Any]:
    """Plan, approve and run ``code`` (python) through the server's REST API."""
    plan = http.post("/api/sandbox/plan", json={"language": "python", "code": code})
    approval = http.post("/api/sandbox/approve", json={"plan_id": plan.json()["plan"]["plan_id"]})
    answer = http.post(
        "/api/sandbox/run", json={"approval_token": approval.json()["approval_token"]}
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_the_server_reports_its_pool_and_closes_it_with_itself(tmp_path: Path) -> None:
    require_mechanism("bwrap")
    server = start_live_server(
        tmp_path,
        env={POOL_ENV: ""},
        args=["--SandboxApp.pool=auto", "--SandboxApp.pool_max_slots=3"],
    )
    try:
        with server.client() as http:
            report = http.get("/api/sandbox/status").json()["pool"]
            require_system("bwrap", report["active"], f"no pool here: {report['reason']}")
            # Started with the server (pool_prewarm: python): even the first run is warm.
            deadline = time.monotonic() + 30
            results = []
            for _ in range(3):
                while (pool := http.get("/api/sandbox/status").json()["pool"])["idle"] < 2:
                    assert time.monotonic() < deadline, pool
                    time.sleep(0.05)
                results.append(rest_run(http, "print(6 * 7)"))
            while (pool := http.get("/api/sandbox/status").json()["pool"])["idle"] < 2:
                assert time.monotonic() < deadline, pool  # the last one's slot is replaced
                time.sleep(0.05)
        assert [(r["stdout"], r["warm"]) for r in results] == [("42\n", True)] * 3
        assert pool["mode"] == "auto" and pool["active"] and pool["max_slots"] == 3
        assert (pool["hits"], pool["misses"]) == (3, 0)
        # The waiting slots: bubblewrap children of the server, each in its run folder.
        # (/proc lists a child under the thread that started it: the pool's are workers.)
        tasks = Path(f"/proc/{server.pid}/task").glob("*/children")
        children = [pid for task in tasks for pid in task.read_text().split()]
        slots = {
            int(pid): os.readlink(f"/proc/{pid}/cwd")
            for pid in children
            if b"bwrap" in Path(f"/proc/{pid}/cmdline").read_bytes()
        }
        assert len(slots) >= 2, "no waiting sandbox under the server"
        prefix = run_prefix(server.pid)
    finally:
        server.stop()
    # SIGTERM: the server stopped its extension, which closed the pool.
    for pid, folder in slots.items():
        assert not Path(f"/proc/{pid}").exists(), f"slot {pid} outlived the server"
        assert not Path(folder).exists(), f"{folder} outlived the server"
    # cgroups.detect, not _cgroup_tree: that removes a gone server's empty cgroups itself.
    tree, _ = cgroups.detect()
    for parent in (tree.memory_parent, tree.pids_parent) if tree is not None else ():
        if parent is not None:
            assert not list(parent.glob(f"{prefix}*"))


def test_the_cli_keeps_no_pool_for_one_command_unless_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gitpilot_jupyter.cli.commands import make_client

    monkeypatch.delenv(POOL_ENV, raising=False)
    assert make_client().service.backends.subprocess.pool_config.mode == "off"
    assert make_client(pool="auto").service.backends.subprocess.pool_config.mode == "auto"
    monkeypatch.setenv(POOL_ENV, "always")
    assert make_client().service.backends.subprocess.pool_config.mode == "always"


def test_calls_each_on_a_loop_of_their_own_stay_warm() -> None:
    # The CLI's commands: each call on a new loop (asyncio.run), which is gone before
    # the pool's workers finish; the refill must not wait for it.
    backend = pooled()
    results: list[RunResult] = []
    try:
        for _ in range(6):
            results.append(asyncio.run(backend.run(request("print(1)"))))
            time.sleep(0.5)
    finally:
        asyncio.run(backend.aclose())
    assert [r.warm for r in results] == [False] + [True] * 5


def test_calls_from_kernel_cells_stay_warm() -> None:
    # A kernel's cells: run_sync hands each call to one long-lived loop in a thread.
    backend = pooled()
    results: list[RunResult] = []

    async def cell() -> None:
        results.append(run_sync(backend.run(request("print(1)"))))

    try:
        for _ in range(6):
            asyncio.run(cell())
            time.sleep(0.5)
    finally:
        asyncio.run(backend.aclose())
    assert [r.warm for r in results] == [False] + [True] * 5


def test_a_backend_let_go_inside_a_pool_worker_closes_its_pool_there() -> None:
    # The worker starting a slot holds the backend for a moment: when the owner lets
    # go first, the backend dies in that worker, which must close the pool without
    # waiting for itself.
    backend = pooled(max_slots=1, min_slots=1)
    owner = weakref.ref(backend)

    def slow(key: Any) -> Any:
        time.sleep(0.5)  # the pool's worker holds the backend meanwhile
        mine = owner()
        assert mine is not None
        return SubprocessSandbox._spawn_slot(mine, key)

    backend._spawn_slot = slow  # type: ignore[method-assign]
    pool = the_pool(backend)
    asyncio.run(backend.run(request("pass")))  # its end starts a slot (slowly)
    del backend
    gc.collect()
    assert owner() is not None  # still held by the worker
    deadline = time.monotonic() + 30
    while not pool._closed or pool.starting():
        assert time.monotonic() < deadline, "the pool was not closed"
        time.sleep(0.05)
    assert pool.idle() == 0


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
