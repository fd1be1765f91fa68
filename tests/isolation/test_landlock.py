"""The namespace-free wall (Landlock + seccomp + no_new_privs + rlimits), by its effects.

Each test walls a real child with :class:`Wall`, has it try something, and looks at
the effect from outside (the file, the listener, the process it aimed at).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local import landlock, seccomp
from gitpilot_jupyter.sandbox.local.landlock import FsRules, Wall
from tests.support.system import require_system


@pytest.fixture(autouse=True)
def _landlock() -> None:
    require_system("landlock", landlock.abi() >= 1, "the kernel has no enabled Landlock")
    require_system("libseccomp", seccomp.compiled()[0] is not None, str(seccomp.compiled()[1]))


def make_wall(
    run: Path,
    *,
    read: Sequence[str] = (),
    devices: Sequence[str] = (),
    allow_inet: bool = False,
    with_seccomp: bool = True,
    rlimits: Sequence[tuple[int, int, int]] = (),
    ids: tuple[int, int] | None = None,
) -> Wall:
    """A wall giving the interpreter, ``read``, ``devices`` and the run folder ``run``."""
    rules = FsRules(
        execute=landlock.interpreter_rules(),
        read=tuple(read),
        write=(str(run),),
        devices=tuple(devices),
    )
    bpf = seccomp.compiled_namespace_free(allow_inet=allow_inet)[0] if with_seccomp else None
    fd = landlock.ruleset(rules, deny_tcp=True, scoped=True)
    return Wall(fd, bpf=bpf, rlimits=rlimits, ids=ids)


def walled(wall: Wall, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code args`` behind ``wall``; it must start and exit 0."""
    try:
        result, reason = landlock.run_walled(wall, [sys.executable, "-I", "-c", code, *args])
    finally:
        wall.close()
    assert result is not None, reason
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture
def run(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    return folder


TRY_READ = """
import sys
for path in sys.argv[1:]:
    try:
        print(path, open(path).read())
    except OSError as exc:
        print(path, type(exc).__name__)
"""


def test_a_file_outside_the_rules_cannot_be_read(tmp_path: Path, run: Path) -> None:
    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text("PRIVATE-KEY")
    allowed = tmp_path / "home" / "allowed.txt"
    allowed.write_text("ALLOWED")  # a rule on one file opens that file, not its folder
    (run / "mine.txt").write_text("MINE")
    out = walled(
        make_wall(run, read=[str(allowed)]), TRY_READ, str(key), str(allowed), str(run / "mine.txt")
    )
    assert "PRIVATE-KEY" not in out.stdout
    assert f"{key} PermissionError" in out.stdout
    assert "ALLOWED" in out.stdout and "MINE" in out.stdout


def test_writes_land_only_inside_its_folder(tmp_path: Path, run: Path) -> None:
    code = """
import os, sys
run, outside = sys.argv[1], sys.argv[2]
planted = "/tmp/gitpilot-landlock-planted-" + str(os.getpid())
for path in (os.path.join(outside, "planted"), planted):
    try:
        open(path, "w").write("x")
    except OSError:
        pass
os.makedirs(os.path.join(run, "a", "b"))
open(os.path.join(run, "a", "b", "f"), "w").write("inside")
os.rename(os.path.join(run, "a", "b", "f"), os.path.join(run, "g"))
try:
    os.rename(os.path.join(run, "g"), os.path.join(outside, "moved"))
except OSError:
    pass
print(os.getpid())
"""
    outside = tmp_path / "outside"
    outside.mkdir()
    out = walled(make_wall(run), code, str(run), str(outside))
    assert list(outside.iterdir()) == []
    assert not Path(f"/tmp/gitpilot-landlock-planted-{out.stdout.strip()}").exists()
    assert (run / "g").read_text() == "inside"
    assert (run / "a" / "b").is_dir()


def test_python_runs_with_its_standard_library_and_devices(run: Path) -> None:
    code = """
import json, subprocess, sys
with open("/dev/null", "w") as null, open("/dev/urandom", "rb") as rnd:
    null.write("x")
    n = len(rnd.read(8))
child = subprocess.run([sys.executable, "-I", "-c", "print(6 * 7)"], capture_output=True, text=True)
print(json.dumps([n, child.stdout.strip()]))
"""
    out = walled(make_wall(run, devices=["/dev/null", "/dev/urandom"]), code)
    assert out.stdout.strip() == '[8, "42"]'


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(4)
        server.setblocking(False)
        yield server


def arrived(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


CONNECT = """
import socket, sys
family, address = sys.argv[1], sys.argv[2]
try:
    if family == "inet":
        s = socket.socket()
        s.settimeout(5)
        s.connect(("127.0.0.1", int(address)))
    else:
        s = socket.socket(socket.AF_UNIX)
        s.connect(address)
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


@pytest.mark.parametrize("allow_inet", [False, True], ids=["network-off", "inet-sockets-allowed"])
def test_a_loopback_tcp_connect_never_arrives(
    run: Path, listener: socket.socket, allow_inet: bool
) -> None:
    if allow_inet:  # then only Landlock's TCP rules stand in the way
        require_system("landlock", landlock.abi() >= landlock.NET_ABI, "TCP rules need ABI 4")
    port = str(listener.getsockname()[1])
    out = walled(make_wall(run, allow_inet=allow_inet), CONNECT, "inet", port)
    assert out.stdout.strip() == "PermissionError"
    assert not arrived(listener)
    control = subprocess.run(
        [sys.executable, "-I", "-c", CONNECT, "inet", port], capture_output=True, text=True
    )
    assert control.stdout.strip() == "connected" and arrived(listener)


@pytest.mark.parametrize("allow_inet", [False, True], ids=["network-off", "inet-sockets-allowed"])
def test_a_unix_socket_cannot_be_reached(tmp_path: Path, run: Path, allow_inet: bool) -> None:
    path = str(tmp_path / "docker.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen(1)
        server.setblocking(False)
        wall = make_wall(run, read=[str(tmp_path)], allow_inet=allow_inet)
        out = walled(wall, CONNECT, "unix", path)
        assert out.stdout.strip() == "PermissionError"
        assert not arrived(server)


def test_signals_to_a_process_outside_the_wall_fail(run: Path) -> None:
    require_system("landlock", landlock.abi() >= landlock.SCOPE_ABI, "signal scoping needs ABI 6")
    code = """
import os, signal, subprocess, sys
try:
    os.kill(int(sys.argv[1]), signal.SIGKILL)
    print("sent")
except OSError as exc:
    print(type(exc).__name__)
own = subprocess.Popen(["sleep", "30"])
own.kill()  # its own children are inside the wall: that works
print(own.wait())
"""
    with subprocess.Popen(["sleep", "30"]) as target:
        try:
            out = walled(make_wall(run), code, str(target.pid))
            assert out.stdout.split() == ["PermissionError", str(-signal.SIGKILL)]
            assert target.poll() is None
        finally:
            target.kill()


SETSID = """
import os
try:
    os.setsid()
except OSError as exc:
    print(type(exc).__name__)
print(os.getsid(0))
"""


def test_a_walled_process_cannot_leave_its_session(run: Path) -> None:
    out = walled(make_wall(run), SETSID)
    assert out.stdout.split() == ["PermissionError", str(os.getsid(0))]
    # Control: without the filter the same child does leave (so the check can fail).
    control = walled(make_wall(run, with_seccomp=False), SETSID)
    assert control.stdout.split() != [str(os.getsid(0))]


def test_the_server_environment_stays_unreadable(
    run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITPILOT_TEST_SERVER_TOKEN", "SERVER-TOKEN-VALUE")
    with subprocess.Popen(
        ["sleep", "30"], env=dict(os.environ)
    ) as server:  # a process with the token
        try:
            paths = [f"/proc/{server.pid}/environ", f"/proc/{os.getpid()}/environ", "/proc/cpuinfo"]
            out = walled(make_wall(run, read=["/proc/cpuinfo"]), TRY_READ, *paths)
        finally:
            server.kill()
    assert "SERVER-TOKEN-VALUE" not in out.stdout
    lines = out.stdout.splitlines()
    assert f"{paths[0]} PermissionError" in lines
    assert f"{paths[1]} PermissionError" in lines
    assert "processor" in out.stdout  # a single /proc file rule works


@pytest.mark.parametrize("path", ["/proc", "/proc/self", "/proc/1", "/proc/self/task"])
def test_no_rule_opens_proc_or_a_process_in_it(path: str) -> None:
    # Landlock's ptrace scope does not keep /proc/PID/environ (PTRACE_MODE_READ) here.
    with pytest.raises(ValueError, match="/proc"):
        landlock.ruleset(FsRules(read=(path,)), deny_tcp=True, scoped=True)


def test_a_file_rule_resolving_into_a_process_folder_is_skipped(tmp_path: Path, run: Path) -> None:
    link = tmp_path / "environ-link"
    link.symlink_to(f"/proc/{os.getpid()}/environ")  # as /etc/mtab -> /proc/self/mounts
    out = walled(make_wall(run, read=[str(link)]), TRY_READ, f"/proc/{os.getpid()}/environ")
    assert out.stdout.split() == [f"/proc/{os.getpid()}/environ", "PermissionError"]


def test_rlimits_are_set_before_the_code_starts(run: Path) -> None:
    code = """
import resource, sys
try:
    open(sys.argv[1], "wb").write(b"x" * 200_000)
    print("wrote")
except OSError as exc:
    print(type(exc).__name__, exc.errno)
print(resource.getrlimit(resource.RLIMIT_FSIZE))
"""
    wall = make_wall(run, rlimits=[(resource.RLIMIT_FSIZE, 100_000, 100_000)])
    out = walled(wall, code, str(run / "big"))
    # EFBIG (Python ignores SIGXFSZ), not a Landlock refusal.
    assert out.stdout.splitlines() == ["OSError 27", "(100000, 100000)"]
    assert (run / "big").stat().st_size == 100_000


def test_a_root_server_drops_to_the_run_ids(run: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only a root server drops ids")
    wall = make_wall(run, ids=(65534, 65534))
    try:
        result, reason = landlock.run_walled(wall, ["/bin/sh", "-c", "id -u; id -g; id -G"])
    finally:
        wall.close()
    assert result is not None, reason
    assert result.stdout.split() == ["65534", "65534", "65534"]


def test_a_wall_that_cannot_be_applied_stops_the_spawn(tmp_path: Path, run: Path) -> None:
    wall = make_wall(run)
    os.close(wall.ruleset_fd)  # restrict_self then fails (EBADF, or EBADFD on a reused number)
    marker = tmp_path / "ran"
    argv = [sys.executable, "-I", "-c", f"open({str(marker)!r}, 'w').write('ran')"]
    with pytest.raises(subprocess.SubprocessError):
        subprocess.run(argv, preexec_fn=wall.apply, check=False)
    result, reason = landlock.run_walled(wall, argv)
    assert result is None and "landlock_restrict_self failed" in reason
    assert not marker.exists()
    wall.ruleset_fd = -1


def test_the_probe_holds_here_and_not_enforced_is_no_wall(monkeypatch: pytest.MonkeyPatch) -> None:
    assert landlock.probe() is None
    monkeypatch.setattr(landlock, "abi", lambda: 0)
    assert landlock.probe.__wrapped__() == "Landlock is not enforced here (ABI 0)"


def test_a_rule_on_a_missing_path_is_skipped_and_a_file_rule_is_accepted(tmp_path: Path) -> None:
    one_file = tmp_path / "f"
    one_file.write_text("x")
    rules = FsRules(
        execute=(str(one_file),), read=(str(tmp_path / "missing"),), write=(str(one_file),)
    )
    fd = landlock.ruleset(rules, deny_tcp=True, scoped=True)
    with contextlib.suppress(OSError):
        os.close(fd)
