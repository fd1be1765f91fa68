"""A python slot's interpreter is started ahead, and a snippet cannot tell.

Each snippet runs twice with the same isolation: cold (the pool off) and through a
warm slot whose interpreter was already started and waiting (``.prestart``). The
envelopes (stdout, stderr, exit code) must be equal, the run folder's name aside.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.errors import InvalidSetting
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.pool import PRESTART_ENV, PoolConfig
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.rich.wire import SHIM_LOADER, SHIM_SHOWN, shim_source

from .pooling import PATH as PATH_ENV
from .pooling import own_uids_named, request, scenario, the_pool, until, waiting_slot
from .pooling import pooled as _pooled


def pooled(mode: str = "auto", **config: Any) -> SubprocessSandbox:
    """A bwrap backend whose python slots start their interpreter ahead."""
    return _pooled(mode, prestart=True, **config)


#: name -> (code, stdin text or None)
CASES: dict[str, tuple[str, str | None]] = {
    "print": ("print('hello', 2 + 2)\nprint('no newline at the end', end='')", None),
    "stderr": ("import sys\nprint('to stderr', file=sys.stderr)\nsys.stderr.write('raw')", None),
    "traceback": (
        "def inner():\n    return 1 / 0\n\ndef outer():\n    inner()\n\nprint('before')\nouter()",
        None,
    ),
    "chained traceback": (
        "try:\n    {}['k']\nexcept KeyError as e:\n    raise ValueError('wrapped') from e",
        None,
    ),
    "SystemExit(3)": ("print('out')\nraise SystemExit(3)", None),
    "SystemExit('msg')": ("import sys\nsys.exit('a message')", None),
    "SystemExit(None)": ("import sys\nprint('x')\nsys.exit()", None),
    "KeyboardInterrupt": ("print('going')\nraise KeyboardInterrupt", None),
    "argv, file, name, path": (
        (
            "import sys, os\n"
            "print(sys.argv, sys.orig_argv[1:], __file__, __name__, sys.path)\n"
            "print(__doc__, __package__, __spec__, type(__loader__).__name__, __cached__)\n"
            "print(type(__builtins__), __builtins__ is __import__('builtins'))\n"
            "print(sorted(globals()), sys.flags)\n"
            "print(oct(os.stat(__file__).st_mode), os.stat(__file__).st_uid)"
        ),
        None,
    ),
    "coding latin-1": ("# -*- coding: latin-1 -*-\ns = 'caf\u00e9'\nprint(len(s), ascii(s))", None),
    "coding ascii, non-ascii text": ("# coding: ascii\nprint('caf\u00e9')", None),
    "utf-8 bom": ("\ufeffprint('bom')", None),
    "stdin text": (
        "import sys\nprint(repr(sys.stdin.readline()))\nprint(repr(sys.stdin.read()))",
        "first\nrest\n",
    ),
    "input() without stdin": ("print('asking')\nx = input('? ')", None),
    "atexit": (
        "import atexit\natexit.register(lambda: print('at exit'))\nprint('main')",
        None,
    ),
    "finalizers at exit": (
        (
            "class Bye:\n"
            "    def __init__(self, name):\n        self.name = name\n"
            "    def __del__(self):\n        print('bye', self.name)\n"
            "held = Bye('global')\n"
            "cycle = Bye('cycle')\ncycle.me = cycle\ndel cycle\n"
            "print('main')"
        ),
        None,
    ),
    "syntax error": ("print('never')\nx = (1,\nprint(x", None),
    "indentation error": ("if True:\nprint('x')", None),
    "what it sees": (
        (
            "import os, sys\n"
            "print(sorted(os.listdir('.')), os.listdir('/tmp'))\n"
            "print(sorted(os.listdir('/proc/self/fd')), os.readlink('/proc/self/fd/0'))\n"
            "print(sorted(k for k in os.environ), os.environ.get('PYTHONPATH'))\n"
            "print(sorted(sys.modules))\n"
            "print(sorted(sys.path_importer_cache))"
        ),
        None,
    ),
    "stack and warnings": (
        (
            "import traceback, warnings, sys\n"
            "traceback.print_stack()\n"
            "warnings.warn('past the top', stacklevel=2)\n"
            "print(sys._getframe().f_back)"
        ),
        None,
    ),
    "recursion depth": (
        (
            "import sys\n"
            "def down(n):\n"
            "    try:\n        return down(n + 1)\n"
            "    except RecursionError:\n        return n\n"
            "print(down(1))"
        ),
        None,
    ),
}


def _same(text: str) -> str:
    # (An object's address differs from run to run: the display shim's frame, which
    # ``sys._getframe().f_back`` is at the top of a run, is such an object.)
    text = re.sub(r" at 0x[0-9a-f]+", " at 0x-", text)
    return own_uids_named(re.sub(r"gitpilot-sandbox-\w+", "gitpilot-sandbox-X", text))


def _run_all(backend: SubprocessSandbox, *, warm: bool) -> dict[str, RunResult]:
    results: dict[str, RunResult] = {}

    async def body(backend: SubprocessSandbox) -> None:
        for name, (code, stdin) in CASES.items():
            if warm:  # one slot of each key ready, its interpreter started
                await backend.run(request("pass", stdin=stdin))
                await until(lambda: the_pool(backend).idle() >= 1)
            results[name] = await backend.run(request(code, stdin=stdin))

    scenario(body, backend)
    return results


def test_a_prestarted_run_cannot_be_told_from_a_cold_one() -> None:
    warm_backend = pooled("always", max_slots=2)
    cold = _run_all(
        SubprocessSandbox(isolator=LayeredIsolator("bwrap"), pool=PoolConfig(mode="off")),
        warm=False,
    )
    warm = _run_all(warm_backend, warm=True)
    differ = {}
    for name in CASES:
        assert not cold[name].warm and warm[name].warm, name
        got = (_same(warm[name].stdout), _same(warm[name].stderr), warm[name].exit_code)
        want = (_same(cold[name].stdout), _same(cold[name].stderr), cold[name].exit_code)
        if got != want:
            differ[name] = (want, got)
    assert not differ
    # The cases did what they say (not two identical failures).
    assert cold["SystemExit(3)"].exit_code == 3
    assert cold["SystemExit('msg')"].stderr == "a message\n"
    assert "café" in cold["coding latin-1"].stdout or "caf" in cold["coding latin-1"].stdout
    assert cold["KeyboardInterrupt"].exit_code == 130
    assert "EOFError" in cold["input() without stdin"].stderr
    assert cold["atexit"].stdout == "main\nat exit\n"
    assert "SyntaxError" in cold["syntax error"].stderr and not cold["syntax error"].stdout
    assert "ZeroDivisionError" in cold["traceback"].stderr
    assert "None\n" in cold["what it sees"].stdout  # no PYTHONPATH


def test_the_slot_holds_the_started_interpreter_waiting() -> None:
    seen: list[tuple[bool, list[str]]] = []

    async def body(backend: SubprocessSandbox) -> None:
        slot = await waiting_slot(backend)
        commands = []
        for pid in _tree(slot.popen.pid):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            words = [a.decode() for a in cmdline if a]
            # The display shim's loader (or its text) is one word: shown by its name.
            shim = (shim_source(), SHIM_LOADER)
            shown = [SHIM_SHOWN if w in shim else os.path.basename(w) for w in words]
            commands.append(" ".join(shown))
        seen.append((slot.prestarted, commands))

    scenario(body, pooled(max_slots=1))
    prestarted, commands = seen[0]
    assert prestarted
    want = rf"python[\d.]* -c {re.escape(SHIM_SHOWN)} inline\.py"
    assert any(re.fullmatch(want, c) for c in commands), commands


def _tree(pid: int) -> list[int]:
    out = []
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return out
    for child in map(int, children):
        out += [child, *_tree(child)]
    return out


@pytest.mark.parametrize("language", ["bash"])
def test_other_languages_keep_the_fifo_slot(language: str) -> None:
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        results.append(await backend.run(request("echo warm $0", language=language)))
        await until(lambda: the_pool(backend).idle() >= 1)
        slot = next(s for q in the_pool(backend)._idle.values() for s in q)
        results.append(await backend.run(request(f"echo {slot.prestarted}", language=language)))

    scenario(body, pooled("always", max_slots=1))
    assert [r.stdout for r in results] == ["warm inline.sh\n", "False\n"]
    assert all(r.warm for r in results)


def test_code_of_another_slot_never_reaches_this_one() -> None:
    # Two pre-started slots, two runs at once: each prints its own code's marker.
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        await backend.run(request("pass"))
        await until(lambda: the_pool(backend).idle() >= 2)
        runs = [backend.run(request(f"print('{n}', open(__file__).read()[-4:])")) for n in "ab"]
        results.extend(await asyncio.gather(*runs))

    scenario(body, pooled("auto", max_slots=2, min_slots=2))
    assert [r.stdout.split()[0] for r in results] == ["a", "b"]
    assert all(r.warm for r in results)


def test_a_network_on_slot_starts_its_interpreter_ahead_too() -> None:
    code = "import os, socket\nprint(sorted(os.listdir('/proc/self/fd')), socket.gethostname())"
    results: list[RunResult] = []

    async def body(backend: SubprocessSandbox) -> None:
        for _ in range(2):
            results.append(await backend.run(request(code, allow_network=True)))

    cold = SubprocessSandbox(isolator=LayeredIsolator("bwrap"), pool=PoolConfig(mode="off"))
    scenario(body, cold)
    scenario(body, pooled("always", max_slots=1))
    assert [r.warm for r in results] == [False, False, True, True]
    assert len({r.stdout for r in results}) == 1 and results[0].exit_code == 0, results


def test_the_setting_and_its_environment_variable() -> None:
    assert PoolConfig().prestart  # on by default
    assert PoolConfig.from_env({}).prestart
    assert PoolConfig.from_env({PRESTART_ENV: "1"}).prestart
    assert not PoolConfig.from_env({PRESTART_ENV: "0"}).prestart
    assert not PoolConfig.from_env({PRESTART_ENV: "1"}, prestart=False).prestart
    with pytest.raises(InvalidSetting, match=PRESTART_ENV):
        PoolConfig.from_env({PRESTART_ENV: "maybe"})


def _pipe_holders(pids: list[int], pipe: int) -> dict[int, list[str]]:
    """Which of ``pids`` hold the pipe with inode ``pipe``, on which fds."""
    held: dict[int, list[str]] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == f"pipe:[{pipe}]":
                        held.setdefault(pid, []).append(fd)
    return held


def test_only_the_interpreter_holds_the_run_s_output_pipes() -> None:
    """Bubblewrap's monitor and init never hold the run's stdout and stderr: the
    output ends when the interpreter's process does, not after their exits. The
    interpreter holds them on 1 and 2 (as a cold run's), and nothing else of them."""
    seen: dict[str, Any] = {}

    async def body(backend: SubprocessSandbox) -> None:
        slot = await waiting_slot(backend)
        assert slot.popen.stdout is not None and slot.popen.stderr is not None
        chain = [slot.popen.pid, *_tree(slot.popen.pid)]
        python = [
            pid
            for pid in chain
            # (the interpreter: python -c SHIM inline.py)
            if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:2] == [b"-c"]
        ]
        seen["python"] = python
        seen["chain"] = chain
        for name, pipe in (("stdout", slot.popen.stdout), ("stderr", slot.popen.stderr)):
            seen[name] = _pipe_holders(chain, os.fstat(pipe.fileno()).st_ino)
        seen["fds"] = sorted(os.listdir(f"/proc/{python[0]}/fd"), key=int)

    scenario(body, pooled(max_slots=1))
    [python] = seen["python"]
    assert len(seen["chain"]) >= 3  # bubblewrap's monitor and init, the interpreter
    assert seen["stdout"] == {python: ["1"]}, seen
    assert seen["stderr"] == {python: ["2"]}, seen
    assert "8" not in seen["fds"] and "9" not in seen["fds"], seen["fds"]


def test_what_the_interpreter_writes_as_it_starts_is_in_the_run_s_stderr() -> None:
    """Before the hook, the interpreter's start writes to the chain's own pipe; a
    warm run's stderr still begins with it, as a cold run's does."""
    env = {**PATH_ENV, "PYTHONWARNINGS": "bogus"}  # warned of at start, before site
    code = "import sys\nprint('ran', file=sys.stderr)"
    results: list[RunResult] = []

    async def twice(backend: SubprocessSandbox) -> None:
        for _ in range(2):
            results.append(await backend.run(request(code, env=env)))
            if backend.pool() is not None:  # the second pooled run takes a slot
                await until(lambda: the_pool(backend).idle() >= 1)

    cold = SubprocessSandbox(isolator=LayeredIsolator("bwrap"), pool=PoolConfig(mode="off"))
    scenario(twice, cold)
    scenario(twice, pooled(max_slots=1))
    assert [r.warm for r in results] == [False, False, False, True]
    assert "Invalid -W option ignored" in results[0].stderr
    assert results[0].stderr.endswith("ran\n")
    assert {r.stderr for r in results} == {results[0].stderr}, results
