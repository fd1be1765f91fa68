"""The warm pool on the namespace-free engine: slots walled before they wait.

Real Landlock slots (run as the docker-group user, or as root with the interpreter's
folders opened up: see ``scripts/as_docker_user.py``). A warm run must see what a
cold run sees, come from a slot whose wall went up before it waited, and never be
handed a slot whose wall is out of date.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.local import nsfree
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.isolation import Launch
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.nsfree import RUN_UID_BASE
from gitpilot_jupyter.sandbox.local.pool import PoolConfig, Slot

from .conftest import SMALL, require_landlock
from .test_pool import scenario, the_pool, until

PATH = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def walled_pool(mode: str = "always", **config: Any) -> SubprocessSandbox:
    """A landlock backend with a pool of its own (the test fails if it has none)."""
    isolator = LayeredIsolator("landlock")
    require_landlock(isolator)
    backend = SubprocessSandbox(isolator=isolator, pool=PoolConfig(mode=mode, **config))
    assert mode == "off" or backend.pool_error() is None, backend.pool_error()
    return backend


def request(code: str, **extra: Any) -> RunRequest:
    extra.setdefault("env", dict(PATH))
    extra.setdefault("limits", SMALL)
    return RunRequest(language=extra.pop("language", "python"), code=code, timeout_sec=20, **extra)


SEES = rf"""
import os, sys
here = os.getcwd()
uid = "a run's own" if os.getuid() >= {RUN_UID_BASE} else os.getuid()
def show(text):
    print(str(text).replace(here, "HERE"))
show(f"uid {{uid}} argv {{sys.argv}} file {{__file__}} path0 {{sys.path[0]}}")
fds = []
for fd in range(64):
    try:
        os.fstat(fd)
        fds.append(fd)
    except OSError:
        pass
show(f"fds {{fds}} here {{sorted(os.listdir('.'))}} env {{sorted(os.environ)}}")
show(f"pythonpath {{os.environ.get('PYTHONPATH')}} modules {{'sitecustomize' in sys.modules}}")
for probe in (os.path.expanduser("~/.."), "/proc/1/environ", "/etc/shadow"):
    try:
        open(probe).read() if not os.path.isdir(probe) else os.listdir(probe)
        print("reached", probe)
    except OSError:
        pass
"""
BASH = 'echo "$0" "$(ls -A)" "$(ls /proc/self/fd 2>&1 | wc -l)"; cat /etc/shadow 2>/dev/null; true'


@pytest.mark.parametrize("prestart", [True, False], ids=["prestarted", "fifo"])
@pytest.mark.parametrize("language", ["python", "bash"])
def test_a_warm_run_sees_what_a_cold_run_sees_behind_the_same_wall(
    language: str, prestart: bool
) -> None:
    code = SEES if language == "python" else BASH
    cold = asyncio.run(walled_pool("off").run(request(code, language=language)))
    assert cold.exit_code == 0, cold.stderr

    async def body(backend: SubprocessSandbox) -> None:
        warm = await backend.run(request(code, language=language))
        assert warm.warm is True, warm.stderr
        assert (warm.stdout, warm.stderr, warm.exit_code) == (
            cold.stdout,
            cold.stderr,
            cold.exit_code,
        )
        assert warm.isolation == cold.isolation
        assert "reached" not in warm.stdout

    scenario(body, walled_pool(prestart=prestart))


def test_a_slot_waits_walled_and_its_session_is_gone_after_its_run() -> None:
    backend = walled_pool()

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await until(lambda: pool.idle() >= 1)
        slot: Slot = next(s for q in pool._idle.values() for s in q)
        status = Path(f"/proc/{slot.popen.pid}/status").read_text()
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        # Walled before it waits: no_new_privs and a seccomp filter are on the waiting
        # process; its code has not arrived (nothing of the run's file exists yet).
        assert fields["NoNewPrivs"].strip() == "1"
        assert fields["Seccomp"].strip() == "2"
        assert not (slot.workdir / "inline.py").is_file()
        sid = slot.popen.pid
        done = await backend.run(request("import os; os.fork() or __import__('time').sleep(60)"))
        assert done.warm is True, done.stderr
        await until(lambda: not _session_alive(sid), within=10)

    scenario(body, backend)


def _session_alive(sid: int) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat.rpartition(")")[2].split()[3] == str(sid):
                return True
    return False


def test_many_slots_started_together_from_worker_threads_all_serve() -> None:
    # Mode always: each run of a burst starts its own slot, several worker threads
    # forking walled children at once.
    backend = walled_pool(max_slots=8, spawn_concurrency=4)

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        token = secrets.token_hex(4)
        for burst in range(3):
            runs = [backend.run(request(f"print('{token}', {burst}, {i})")) for i in range(8)]
            results = await asyncio.gather(*runs)
            for i, result in enumerate(results):
                assert (result.exit_code, result.stdout) == (0, f"{token} {burst} {i}\n"), (
                    result.stderr
                )
                assert result.warm is True
        assert pool.stats["failed"] == 0

    scenario(body, backend)


def test_a_slot_made_before_the_wall_changed_is_not_handed_out(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    environ = {**os.environ, "HOME": str(home)}
    isolator = LayeredIsolator("landlock", environ=environ)
    require_landlock(isolator)
    backend = SubprocessSandbox(isolator=isolator, pool=PoolConfig(mode="auto"))
    assert backend.pool_error() is None, backend.pool_error()

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        await backend.run(request("pass"))
        await until(lambda: pool.idle() >= 1)
        (home / ".ssh").mkdir()  # a credential folder the next run's wall leaves out
        done = await backend.run(request("print('x')"))
        assert (done.exit_code, done.stdout) == (0, "x\n"), done.stderr
        assert done.warm is False
        assert pool.stats["stale"] >= 1
        # A slot of the new wall serves a later run (one still starting when the folder
        # was made has the old wall: it goes stale too, and the run after it is warm).
        warm = []
        for _ in range(4):
            await until(lambda: pool.idle() >= 1 and pool.starting() == 0)
            again = await backend.run(request("print('y')"))
            assert (again.exit_code, again.stdout) == (0, "y\n"), again.stderr
            warm.append(again.warm)
            if again.warm:
                break
        assert warm[-1] is True, (warm, str(pool.stats))

    scenario(body, backend)


def test_a_cold_run_beside_a_pool_finds_its_ruleset_built_ahead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A slot's start takes the spare ruleset of its wall (nsfree.SPARES, shared by every
    # backend of the process); it builds the next one, so a cold run of the same wall
    # that follows does not build its ~150 rules on its own path.
    warm, cold = walled_pool(), walled_pool("off")
    found: list[bool] = []  # per cold run: was a spare ready when it took its ruleset
    take, prepare = nsfree._Spares.ruleset, cold.isolator.prepare
    preparing = threading.local()

    def taken(self: nsfree._Spares, *args: Any, **kwargs: Any) -> int:
        if getattr(preparing, "cold", False):
            found.append(bool(self._ready))
        return take(self, *args, **kwargs)

    def prepared(*args: Any, **kwargs: Any) -> Launch:
        preparing.cold = True
        try:
            return prepare(*args, **kwargs)
        finally:
            preparing.cold = False

    monkeypatch.setattr(nsfree._Spares, "ruleset", taken)
    monkeypatch.setattr(cold.isolator, "prepare", prepared)

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        for _ in range(3):
            await until(lambda: not backend.after_runs._pending and not cold.after_runs._pending)
            done = await cold.run(request("print(2+2)"))
            assert (done.exit_code, done.stdout, done.warm) == (0, "4\n", False), done.stderr
            await backend.run(request("print(2+2)"))
            await until(lambda: pool.idle() >= 1 and pool.starting() == 0)
        await cold.aclose()
        # The first cold run had no run of its wall before it.
        assert found[1:] == [True, True]

    scenario(body, warm)
