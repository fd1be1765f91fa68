"""Attacks by a snippet author who read the source, beyond one per threat-model row.

Each is tried through the REST flow on the default backend and checked from outside
where the effect would show (a host socket, a device, a process, a sysctl).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.policy import ENV_ALLOWLIST_ENV, ENV_PASSTHROUGH_ENV
from tests.server.helpers import Api

from .conftest import attack, nonce, processes_named

#: Syscall numbers (x86_64, aarch64): the snippet calls them through ctypes, not libc wrappers.
SYSCALLS = {
    "x86_64": {"keyctl": 250, "ptrace": 101, "unshare": 272, "clone3": 435, "io_uring_setup": 425},
    "aarch64": {"keyctl": 219, "ptrace": 117, "unshare": 97, "clone3": 435, "io_uring_setup": 425},
}

# -- 1: sockets of the host: abstract unix sockets, dbus, containerd -----------------------

SOCKETS = r"""
import json, os, socket
out = {"unix": open("/proc/net/unix").read().count("\n") - 1}
for path in ("/run/containerd/containerd.sock", "/run/dbus/system_bus_socket",
             "/var/run/dbus/system_bus_socket", "/tmp/.X11-unix/X0", "\0" + %(abstract)r):
    key = path.lstrip("\0")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path); s.sendall(b"hello"); out[key] = "connected"
    except OSError as exc:
        out[key] = type(exc).__name__
print(json.dumps(out))
"""


async def test_1_abstract_unix_sockets_dbus_and_containerd_are_out_of_reach(api: Api) -> None:
    name = nonce("abstract")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0" + name)  # a host service on an abstract socket (no file to hide)
    listener.listen(5)
    listener.setblocking(False)
    try:
        result = await attack(api, SOCKETS % {"abstract": name})
        seen = json.loads(result["stdout"])
        with pytest.raises(BlockingIOError):
            listener.accept()  # from outside: nobody connected
    finally:
        listener.close()
    assert seen.pop("unix") == 0, "the run sees the host's unix sockets"
    assert seen.pop(name) == "ConnectionRefusedError"
    assert set(seen.values()) == {"FileNotFoundError"}, seen


# -- 4/5: other processes' /proc (the server's environ and cmdline) --------------

PROCS = r"""
import json, os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
text = ""
for pid in pids + [%(server)d]:
    for entry in ("environ", "cmdline"):
        try:
            text += open(f"/proc/{pid}/{entry}", errors="replace").read()
        except OSError:
            pass
text += open("/proc/self/mountinfo").read()
print(json.dumps({"pids": pids, "text": text}))
"""


async def test_4_the_servers_proc_entries_are_not_visible(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = nonce("token")
    monkeypatch.setenv("JUPYTER_TOKEN", secret)  # what a docker-stacks server holds
    monkeypatch.setenv("GITPILOT_JUPYTER_TOKEN", secret)
    result = await attack(api, PROCS % {"server": os.getpid()})
    seen = json.loads(result["stdout"])
    assert max(seen["pids"]) < 50, seen["pids"]  # its own pid namespace
    assert secret not in seen["text"]


CGROUP_VIEW = r"""
import json
print(json.dumps({"cgroup": open("/proc/self/cgroup").read(),
                  "mountinfo": open("/proc/self/mountinfo").read()}))
"""


async def test_4_the_hosts_cgroup_paths_are_not_visible(api: Api) -> None:
    result = await attack(api, CGROUP_VIEW)
    assert "cgroupns" in result["isolation"], result["isolation"]
    seen = json.loads(result["stdout"])
    # Its own cgroup namespace, rooted at the run cgroup: every path is "/".
    assert seen["cgroup"] and all(
        line.split(":", 2)[2] == "/" for line in seen["cgroup"].splitlines()
    ), seen["cgroup"]
    text = seen["cgroup"] + seen["mountinfo"]
    assert "gitpilot-run-" not in text
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        path = line.split(":", 2)[2]
        assert path == "/" or path not in text, path  # the server's own cgroup paths


# -- 2: devices, /sys and the kernel log ----------------------------------------------------

DEVICES = r"""
import json, os
out = {"sys": os.path.exists("/sys/kernel"), "dev": sorted(os.listdir("/dev"))}
for path, dev in (("mem", (1, 1)), ("kmsg", (1, 11)), ("sda", (8, 0))):
    try:
        os.mknod(path, 0o20666, os.makedev(*dev)); out[path] = "made"
    except OSError as exc:
        out[path] = type(exc).__name__
for path in ("/dev/kmsg", "/proc/kmsg", "/dev/mem", "/proc/kcore", "/dev/net/tun"):
    try:
        open(path, "rb").read(1); out[path] = "read"
    except OSError as exc:
        out[path] = type(exc).__name__
print(json.dumps(out))
"""


async def test_2_no_device_node_no_sys_no_kernel_log(api: Api) -> None:
    result = await attack(api, DEVICES)
    seen = json.loads(result["stdout"])
    assert seen["sys"] is False
    assert {"kmsg", "mem", "net", "sda", "vda"}.isdisjoint(seen["dev"]), seen["dev"]
    assert seen["mem"] == seen["kmsg"] == seen["sda"] == "PermissionError"
    assert "read" not in seen.values(), seen


# -- 2/6: syscalls called by number (no libc wrapper to rely on) ---------------------------

SYSCALL_ATTACK = r"""
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
nr = %(numbers)r
def call(name, *args):
    ctypes.set_errno(0)
    return [libc.syscall(nr[name], *args), ctypes.get_errno()]
params = (ctypes.c_uint32 * 30)()
print(json.dumps({
    "keyctl": call("keyctl", 0, -4, 1),          # KEYCTL_GET_KEYRING_ID, create the user keyring
    "ptrace": call("ptrace", 16, 1, 0, 0),       # PTRACE_ATTACH to the namespace's pid 1
    "unshare": call("unshare", 0x10000000),      # CLONE_NEWUSER: capabilities back
    "clone3": call("clone3", ctypes.byref((ctypes.c_uint64 * 11)(0x10000000)), 88),
    "io_uring_setup": call("io_uring_setup", 4, ctypes.byref(params)),
}))
"""


async def test_2_seccomp_holds_for_raw_syscall_numbers(api: Api) -> None:
    numbers = SYSCALLS.get(platform.machine())
    if numbers is None:
        pytest.skip(f"no syscall table for {platform.machine()}")
    result = await attack(api, SYSCALL_ATTACK % {"numbers": numbers})
    seen = json.loads(result["stdout"])
    eperm, enosys = 1, 38
    assert seen["keyctl"] == [-1, eperm]
    assert seen["ptrace"] == [-1, eperm]
    assert seen["unshare"] == [-1, eperm]
    assert seen["clone3"] == [-1, enosys]  # flags unreadable to the filter: no clone3 at all
    assert seen["io_uring_setup"] == [-1, eperm]


# -- 7/8: the timeout against processes that ignore signals; a fork bomb -----------------

STUBBORN = r"""
import os, signal, time
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
    signal.signal(s, signal.SIG_IGN)
for _ in range(3):
    if os.fork() == 0:
        os.setsid()
        os.execv("/bin/sh", [%(name)r, "-c", "trap '' TERM INT HUP; while :; do sleep 1; done"])
print("started", flush=True)
while True:
    time.sleep(1)
"""


async def test_7_processes_that_ignore_signals_die_at_the_timeout(
    api: Api, reaper: list[str]
) -> None:
    name = nonce("stubborn")
    reaper.append(name)
    started = time.monotonic()
    result = await attack(api, STUBBORN % {"name": name}, timeout_sec=3)
    assert time.monotonic() - started < 30
    assert result["timed_out"] is True, result
    deadline = time.monotonic() + 3
    while processes_named(name) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert processes_named(name) == []


FORK_BOMB = r"""
import json, os, time
made = 0
try:
    while made < 20000:
        if os.fork() == 0:
            os.execv("/bin/sleep", [%(name)r, "600"])
        made += 1
except OSError as exc:
    print(json.dumps({"made": made, "error": type(exc).__name__}), flush=True)
"""


async def test_8_a_fork_bomb_stops_at_the_process_cap(api: Api, reaper: list[str]) -> None:
    name = nonce("bomb")
    reaper.append(name)
    result = await attack(api, FORK_BOMB % {"name": name}, timeout_sec=30)
    seen = json.loads(result["stdout"])
    assert seen["error"] == "BlockingIOError" and 0 < seen["made"] < 1024, seen
    deadline = time.monotonic() + 5
    while processes_named(name) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert processes_named(name) == []  # from outside: none of them outlived the run


# -- 4/5: inherited descriptors; the server's token through --env -------------------------

FDS = r"""
import json, os
fds = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass  # the listing's own descriptor, closed by now
print(json.dumps(fds))
"""


async def test_4_no_descriptor_of_the_server_reaches_a_run(api: Api) -> None:
    result = await attack(api, FDS)
    fds = json.loads(result["stdout"])
    assert set(fds) <= {"0", "1", "2"}, fds  # no listening socket, cgroup file, settings file


async def test_5_a_plan_may_not_pass_the_servers_token(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_TOKEN", nonce("token"))
    for name in ("JUPYTER_TOKEN", "GITPILOT_JUPYTER_TOKEN", "JUPYTERHUB_API_TOKEN"):
        answer = await api(
            "POST", "api/sandbox/plan", {"language": "python", "code": "1", "env": [name]}
        )
        assert answer.code == 400, answer.text
        assert answer.body["code"] == "invalid_env"
        assert "approve its own plans" in answer.body["message"]


def test_5_the_cli_never_passes_the_servers_token(sandbox_config_dir: Path) -> None:
    secret = nonce("token")
    env = {**os.environ, "JUPYTER_TOKEN": secret}
    cli = [str(Path(sys.executable).with_name("jupyter-sandbox")), "run", "python", "-c"]
    code = "import os; print(sorted(os.environ))"
    named = subprocess.run(
        [*cli, code, "--yes", "--env", "JUPYTER_TOKEN"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip
    assert named.returncode != 0 and "approve its own plans" in named.stderr, named.stderr
    for listed in (ENV_ALLOWLIST_ENV, ENV_PASSTHROUGH_ENV):
        admin = subprocess.run(
            [*cli, code + "; print(os.environ.get('JUPYTER_TOKEN'))", "--yes", "--env", "LANG"],
            capture_output=True, text=True, env={**env, listed: "JUPYTER_TOKEN LANG"},
            timeout=120, check=False,
        )  # fmt: skip
        # An administrator's list naming the token is refused, saying which list and why.
        assert admin.returncode != 0 and secret not in admin.stdout, admin.stdout
        assert listed in admin.stderr and "approve its own plans" in admin.stderr


# -- 6: a backdoor in the interpreter the server imports from; hard links to host files ----

BACKDOOR = r"""
import json, os, site, sysconfig
name = %(name)r
out = {}
for folder in {sysconfig.get_paths()["purelib"], os.path.dirname(os.__file__), "/etc",
               "/usr/local/lib", "/usr/lib"}:
    target = os.path.join(folder, name + ".pth")
    try:
        with open(target, "w") as f:
            f.write("import os; os.system('touch /tmp/" + name + "')\n")
        out[folder] = "written"
    except OSError as exc:
        out[folder] = type(exc).__name__
for source in ("/etc/passwd", os.__file__):
    try:
        os.link(source, name)
        out["link " + source] = "linked"
    except OSError as exc:
        out["link " + source] = type(exc).__name__
print(json.dumps(out))
"""


async def test_6_no_backdoor_in_the_servers_interpreter_and_no_hard_link(api: Api) -> None:
    import sysconfig

    name = nonce("backdoor")
    result = await attack(api, BACKDOOR % {"name": name})
    seen = json.loads(result["stdout"])
    assert "written" not in seen.values() and "linked" not in seen.values(), seen
    purelib = Path(sysconfig.get_paths()["purelib"])
    assert not (purelib / f"{name}.pth").exists()  # from outside: nothing for the next import
    assert not (Path("/etc") / f"{name}.pth").exists()


# -- 2/6: the other syscall ABIs of x86_64 (x32 numbers, i386 int 0x80) ---------------------

OTHER_ABIS = r"""
import ctypes, json, mmap, os
def in_child(action):
    pid = os.fork()
    if pid == 0:
        action()
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else -os.WEXITSTATUS(status)
def x32_keyctl():
    ctypes.CDLL(None).syscall(0x40000000 | 250, 0, -4, 1)  # keyctl through the x32 table
def i386_keyctl():
    # mov eax, 288 (i386 keyctl); xor ebx, ebx; xor ecx, ecx; xor edx, edx; int 0x80; ret
    code = b"\xb8" + (288).to_bytes(4, "little") + b"\x31\xdb\x31\xc9\x31\xd2\xcd\x80\xc3"
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
print(json.dumps({"x32": in_child(x32_keyctl), "i386": in_child(i386_keyctl)}))
"""


async def test_2_the_other_syscall_abis_are_killed(api: Api) -> None:
    if platform.machine() != "x86_64":
        pytest.skip("x32 and i386 are x86_64's other ABIs")
    result = await attack(api, OTHER_ABIS)
    assert json.loads(result["stdout"]) == {"x32": 31, "i386": 31}  # SIGSYS, filter's arch check
