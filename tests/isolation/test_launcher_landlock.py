"""The launcher of the namespace-free engine's cold runs (:mod:`.launcher`), by its effects.

A cold run is forked by the launcher, not the server: it must get the same wall,
limits, exit status, output and kill as before, hold nothing of the launcher (no
fd, no way to its socket), and never start unwalled when the launcher is gone.
"""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.local import landlock, launcherclient, seccomp
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from tests.isolation.conftest import SMALL, make_backend, marked_processes, run


@pytest.fixture
def backend() -> SubprocessSandbox:
    return make_backend("landlock")


def _launcher_pid() -> int:
    pid = launcherclient.LAUNCHER.pid
    assert pid is not None, "no launcher runs"
    return pid


def test_a_cold_run_is_the_launchers_child_behind_the_wall(
    backend: SubprocessSandbox, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("secret")
    code = textwrap.dedent(f"""
        import os
        print(os.getppid())
        try:
            open({str(secret)!r}).read()
            print("read")
        except OSError as exc:
            print(type(exc).__name__)
    """)
    result = run(backend, code)
    assert result.exit_code == 0, result.stderr
    parent, read = result.stdout.split()
    assert int(parent) == _launcher_pid()
    assert read == "PermissionError"
    assert "landlock" in result.isolation


def test_cold_runs_one_after_another_each_start_in_a_new_empty_folder(
    backend: SubprocessSandbox,
) -> None:
    # Each run's folder is made ahead, after the run before (cleanup.SPARE_DIRS): a new
    # one each time, holding nothing but the run's own file, the server's mark, an empty
    # out/ and, when the interpreter has matplotlib, the run's own copy of its font list.
    code = textwrap.dedent("""
        import os
        print(os.getcwd(), sorted(os.listdir(".")))
        open("left-behind", "w").write("x")
        os.mkdir("a-folder")
    """)
    seen = []
    for _ in range(3):
        result = run(backend, code)
        assert result.exit_code == 0, result.stderr
        folder, listing = result.stdout.split(" ", 1)
        fresh = ("['.owner', 'inline.py', 'out']", "['.matplotlib', '.owner', 'inline.py', 'out']")
        assert listing.strip() in fresh, listing
        assert not Path(folder).exists() or folder not in seen
        seen.append(folder)
    assert len(set(seen)) == 3


def test_the_snippet_holds_no_fd_of_the_launcher_or_the_server(backend: SubprocessSandbox) -> None:
    code = textwrap.dedent("""
        import os
        open_fds = []
        for fd in range(3, 4096):
            try:
                os.fstat(fd)
            except OSError:
                continue
            open_fds.append(fd)
        print(open_fds)
    """)
    result = run(backend, code)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_snippet_cannot_reach_the_launchers_socket(backend: SubprocessSandbox) -> None:
    launcher = _launcher_pid()
    code = textwrap.dedent(f"""
        import os, socket
        def attempt(what, step):
            try:
                step()
                print(what)
            except OSError as exc:
                print(type(exc).__name__)
        attempt("listed-fds", lambda: os.listdir("/proc/{launcher}/fd"))
        attempt("listed-environ", lambda: os.listdir("/proc/{launcher}/environ"))
        attempt("socket", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET))
        attempt("signalled", lambda: os.kill({launcher}, 0))
    """)
    result = run(backend, code)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.split()
    assert "socket" not in lines and not any(line.startswith("listed") for line in lines)
    if landlock.abi() >= landlock.SCOPE_ABI:
        assert "signalled" not in lines
    assert _launcher_pid() == launcher  # it is still there


def test_exit_status_output_cap_and_stdin_are_the_runs(backend: SubprocessSandbox) -> None:
    result = run(backend, "import sys; print('x' * 5000); sys.exit(3)")
    assert (result.exit_code, result.stdout) == (3, "x" * 5000 + "\n")
    result = run(backend, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert result.exit_code == 128 + signal.SIGKILL
    request = RunRequest(
        language="python",
        code="import sys; print(sys.stdin.read())",
        timeout_sec=20,
        stdin="abcdef",
        limits=SMALL,
        max_output_bytes=3,
    )
    result = asyncio.run(backend.run(request))
    assert result.stdout == "abc" and result.truncated


def test_a_timed_out_run_is_killed_with_everything_it_started(
    backend: SubprocessSandbox, mark: str
) -> None:
    code = (
        "import os, subprocess, sys, time\n"
        f"env = dict(os.environ, M={mark!r})\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env=env)\n"
        "print('up', flush=True)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    result = run(backend, code, timeout_sec=2, env={"PATH": "/usr/bin:/bin", "M": mark})
    assert result.timed_out and result.stdout == "up\n"
    assert time.monotonic() - started < 10
    assert marked_processes(mark) == []


def test_a_dead_launcher_is_started_again_and_runs_stay_walled(
    backend: SubprocessSandbox, tmp_path: Path
) -> None:
    run(backend, "")  # the launcher runs
    before = _launcher_pid()
    os.kill(before, signal.SIGKILL)
    for _ in range(100):  # until the kernel has it dead (its parent reaps it below)
        if launcherclient.LAUNCHER.pid is None:
            break
        time.sleep(0.02)
    outside = tmp_path / "outside"
    code = f"import os; print(os.getppid()); open({str(outside)!r}, 'w')"
    result = run(backend, code)
    assert result.exit_code != 0 and "PermissionError" in result.stderr
    assert not outside.exists()
    after = _launcher_pid()
    assert after != before and int(result.stdout) == after


def test_a_launcher_killed_during_a_run_ends_the_run(backend: SubprocessSandbox, mark: str) -> None:
    run(backend, "")  # the launcher runs
    launcher = _launcher_pid()
    code = "import time; print('up', flush=True); time.sleep(60)"

    async def scenario() -> tuple[float, object]:
        request = RunRequest(
            language="python",
            code=code,
            timeout_sec=30,
            limits=SMALL,
            env={"PATH": "/usr/bin:/bin", "M": mark},
        )
        task = asyncio.ensure_future(backend.run(request))
        for _ in range(200):
            await asyncio.sleep(0.05)
            if marked_processes(mark):
                break
        os.kill(launcher, signal.SIGKILL)
        started = time.monotonic()
        result = await task
        return time.monotonic() - started, result

    elapsed, result = asyncio.run(scenario())
    assert elapsed < 10, result
    assert marked_processes(mark) == []


def test_a_wall_that_cannot_be_set_refuses_the_run(
    backend: SubprocessSandbox, tmp_path: Path
) -> None:
    bpf, why = seccomp.compiled_namespace_free(allow_inet=False)
    assert bpf is not None, why
    not_a_ruleset = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    marker = tmp_path / "ran"
    wall = launcherclient.WallParts(ruleset_fd=not_a_ruleset, bpf=bpf, rlimits=(), ids=None)

    async def attempt() -> None:
        await launcherclient.launch(
            ["/bin/sh", "-c", f"touch {marker}"],
            cwd=str(tmp_path),
            env={},
            wall=wall,
            join_fds=[],
            stdin=False,
        )

    try:
        with pytest.raises(launcherclient.LauncherError, match="landlock_restrict_self failed"):
            asyncio.run(attempt())
    finally:
        os.close(not_a_ruleset)
    assert not marker.exists()


def _ready_children(launcher: int) -> list[int]:
    """The launcher's children that wait for a run (still its program, not a run's)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) == launcher and b"launcher.py" in cmdline:
            found.append(int(entry))
    return found


def test_the_next_runs_process_waits_holding_nothing_and_dies_with_the_launcher(
    backend: SubprocessSandbox,
) -> None:
    run(backend, "")  # a run handed to the launcher, which then forks the next one ahead
    launcher = _launcher_pid()
    ready: list[int] = []
    for _ in range(100):
        ready = _ready_children(launcher)
        if ready:
            break
        time.sleep(0.02)
    assert len(ready) == 1, ready
    fds = sorted(int(fd) for fd in os.listdir(f"/proc/{ready[0]}/fd"))
    targets = [os.readlink(f"/proc/{ready[0]}/fd/{fd}") for fd in fds[3:]]
    # stdio, its own socket and the pipe that tells the launcher it was taken: nothing else
    assert len(fds) == 5 and targets[0].startswith(("socket:", "pipe:")), targets
    os.kill(launcher, signal.SIGKILL)
    for _ in range(200):
        if not Path(f"/proc/{ready[0]}").exists() or "Z" in _state(ready[0]):
            break
        time.sleep(0.02)
    assert not Path(f"/proc/{ready[0]}").exists() or "Z" in _state(ready[0])
    result = run(backend, "print('again')")  # a launcher is started again
    assert (result.exit_code, result.stdout) == (0, "again\n")


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"
