"""One attack per row of the threat model (shared/spec/threat-model.md), checked from outside.

Rows 9 (fooling the approver) and the REST-level abuse are another issue's suite.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.policy import ENV_ALLOWLIST_ENV
from tests.isolation.conftest import make_backend
from tests.server.helpers import Api
from tests.support.system import require_system

from .conftest import (
    attack,
    nonce,
    processes_named,
    runs_drop_groups,
    status_fields,
    wait_for_process,
)

DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")


def host_can_reach_docker() -> str | None:
    """The docker socket the server's own user reaches, or None."""
    for path in DOCKER_SOCKETS:
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)
                return path
        except OSError:
            continue
    return None


# -- 1: reach a host socket or service ----------------------------------------------------

DOCKER_ATTACK = r"""
import json, socket
out = {}
for path in %(paths)r:
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(path)
        body = json.dumps({"Image": "busybox", "Cmd": ["sleep", "600"]})
        s.sendall(("POST /containers/create?name=%(name)s HTTP/1.0\r\nHost: d\r\n"
                   "Content-Type: application/json\r\nContent-Length: %%d\r\n\r\n%%s"
                   %% (len(body), body)).encode())
        out[path] = s.recv(200).decode(errors="replace")
    except OSError as exc:
        out[path] = type(exc).__name__
try:
    socket.create_connection(("127.0.0.1", %(port)d), timeout=3).close()
    out["jupyter"] = "connected"
except OSError as exc:
    out["jupyter"] = type(exc).__name__
print(json.dumps(out))
"""


async def test_1_docker_socket_and_the_jupyter_server_are_out_of_reach(
    api: Api, jp_http_port: int
) -> None:
    reachable = host_can_reach_docker()
    require_system("docker", reachable is not None, "the server's user reaches no docker.sock")
    name = nonce("container")
    code = DOCKER_ATTACK % {"paths": DOCKER_SOCKETS, "name": name, "port": jp_http_port}
    result = await attack(api, code)
    seen = json.loads(result["stdout"])
    for path in DOCKER_SOCKETS:
        assert seen[path] in ("FileNotFoundError", "PermissionError", "ConnectionRefusedError")
    assert seen["jupyter"] != "connected"
    # From outside: the engine made no container of that name.
    listed = subprocess.run(
        ["docker", "ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.strip() == ""


# -- 2: change the host kernel or devices -------------------------------------------------

KERNEL_ATTACK = r"""
import ctypes, os
out = {}
for path, data in (("/proc/sys/kernel/core_pattern", "|/bin/sh -c 'touch %(mark)s'"),
                   ("/proc/sys/kernel/hostname", "%(host)s"),
                   ("/proc/sysrq-trigger", "h")):
    try:
        with open(path, "w") as f:
            f.write(data)
        out[path] = "written"
    except OSError as exc:
        out[path] = type(exc).__name__
libc = ctypes.CDLL(None, use_errno=True)
out["mount"] = libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)
out["mount_errno"] = ctypes.get_errno()
print(out)
"""


async def test_2_sysctls_sysrq_and_mounts_do_not_change_the_host(api: Api, tmp_path: Path) -> None:
    before = {p: Path(p).read_text() for p in ("/proc/sys/kernel/core_pattern",)}
    hostname = Path("/proc/sys/kernel/hostname").read_text()
    mark = tmp_path / "core-pattern-ran"
    result = await attack(api, KERNEL_ATTACK % {"mark": mark, "host": nonce("host")[:60]})
    assert "written" not in result["stdout"], result["stdout"]
    assert "'mount': -1" in result["stdout"]
    assert {p: Path(p).read_text() for p in before} == before
    assert Path("/proc/sys/kernel/hostname").read_text() == hostname
    assert not mark.exists()


# -- 3: act as host root ------------------------------------------------------------------

ROOT_ATTACK = r"""
import os, subprocess
out = {}
for path in ("/etc/shadow", "/etc/gshadow", %(secret)r):
    try:
        out[path] = open(path).read()
    except OSError as exc:
        out[path] = type(exc).__name__
print(out, flush=True)
# Seen from the host: its credentials while this sleeps.
subprocess.run([%(name)r, "20"], executable="/bin/sleep")
"""


async def test_3_a_snippet_is_an_unprivileged_uid_with_no_groups(
    api: Api, planted: Path, reaper: list[str]
) -> None:
    secret = planted / "root-only"
    secret.write_text("root-only-" + nonce("secret"))
    secret.chmod(0o600)
    name = nonce("uid")
    reaper.append(name)
    run = asyncio.ensure_future(attack(api, ROOT_ATTACK % {"secret": str(secret), "name": name}))
    pid = await asyncio.to_thread(wait_for_process, name)
    assert pid is not None, "the snippet's sleeper never showed up"
    creds = status_fields(pid)
    os.kill(pid, 9)
    result = await run
    assert "0" not in creds["Uid"] and "0" not in creds["Gid"], creds
    assert int(creds["CapEff"][0], 16) == 0
    if runs_drop_groups():
        # Root drops to nobody; any other server to the last id of its subordinate
        # range: no groups (docker!), and not the server's uid, so none of its files.
        assert creds["Groups"] == [], creds
        assert str(os.getuid()) not in creds["Uid"] and str(os.getgid()) not in creds["Gid"]
    else:
        assert creds["Uid"][0] == str(os.getuid())  # the disclosed gap (no uidmap here)
    shadow_line = ""
    if os.access("/etc/shadow", os.R_OK):
        shadow_line = Path("/etc/shadow").read_text().splitlines()[0]
    assert shadow_line not in result["stdout"] or not shadow_line
    assert secret.read_text() not in result["stdout"]
    assert "'/etc/shadow': 'root" not in result["stdout"]


# -- 4: read the user's secrets -----------------------------------------------------------

SECRET_ENV = ("DATABASE_URL", "MYSQL_PWD", "AWS_ACCESS_KEY_ID", "GH_PAT", "SSH_PRIVATE_KEY")

HUNT = r"""
import os
found = [f"{k}={v}" for k, v in os.environ.items()]
for root in %(roots)r:
    for folder, dirs, files in os.walk(root):
        for f in files:
            try:
                found.append(open(os.path.join(folder, f), errors="replace").read())
            except OSError:
                pass
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            found.append(open(f"/proc/{pid}/environ", errors="replace").read())
        except OSError:
            pass
print("\n".join(found))
"""


def plant_home(home: Path, secret: str) -> list[Path]:
    """A home folder full of the credentials a hostile snippet looks for."""
    files = {
        ".jupyter/jupyter_server_config.json": json.dumps({"IdentityProvider": {"token": secret}}),
        ".local/share/jupyter/runtime/jpserver-1.json": json.dumps({"token": secret}),
        ".npmrc": f"//registry.invalid/:_authToken={secret}",
        ".ipython/profile_default/history.sqlite": secret,
        ".ssh/id_ed25519": secret,
        ".gitpilot/settings.json": json.dumps({"sandbox": {"matrixlab_token": secret}}),
        ".bash_history": f"export GH_PAT={secret}",
        ".config/chromium/Default/Cookies": secret,
        "notes.txt": secret,
    }
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    return [home / rel for rel in files]


@pytest.mark.parametrize("jp_server_config", [{"env_allowlist": ["GH_PAT"]}], indirect=True)
async def test_4_home_jupyter_files_and_the_environment_stay_secret(
    api: Api, planted: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = nonce("secret")
    home = planted / "home"
    plant_home(home, secret)
    runtime = planted / "runtime"
    runtime.mkdir()
    (runtime / "jpserver-9.json").write_text(json.dumps({"token": secret}))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("JUPYTER_TOKEN", secret)
    for name in SECRET_ENV:
        monkeypatch.setenv(name, secret)
    result = await attack(api, HUNT % {"roots": [str(home), str(runtime), str(planted)]})
    assert result["exit_code"] == 0, result["stderr"]
    assert secret not in result["stdout"] + result["stderr"]
    # Listed by the administrator and named, a variable does reach the run (the allowlist
    # is not a wall of bugs); named without being listed, it is refused before any plan.
    named = await attack(api, "import os; print(os.environ['GH_PAT'])", env=["GH_PAT"])
    assert named["stdout"] == secret + "\n"
    unlisted = {"language": "python", "code": "1", "env": ["MYSQL_PWD"]}
    refused = await api("POST", "api/sandbox/plan", unlisted)
    assert (refused.code, refused.body["code"]) == (400, "env_not_allowed"), refused.text


def test_4_the_cli_passes_no_secret_variable(planted: Path, sandbox_config_dir: Path) -> None:
    secret = nonce("secret")
    home = planted / "home"
    plant_home(home, secret)
    env = {**os.environ, "HOME": str(home), **dict.fromkeys(SECRET_ENV, secret)}
    env[ENV_ALLOWLIST_ENV] = "MYSQL_PWD"  # may be named; passes only when named
    code = HUNT % {"roots": [str(home)]}
    cli = [str(Path(sys.executable).with_name("jupyter-sandbox")), "run", "python", "-c", code]
    cli.append("--yes")
    proc = subprocess.run(cli, capture_output=True, text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout + proc.stderr
    passed = subprocess.run(
        [*cli[:4], "import os; print(os.environ['MYSQL_PWD'])", "--yes", "--env", "MYSQL_PWD"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert passed.stdout == secret + "\n", passed.stderr


# -- 5: approve its own plans -------------------------------------------------------------

SELF_APPROVE = r"""
import json, os, urllib.request
token = os.environ.get("JUPYTER_TOKEN", "")
out = {"token_seen": bool(token)}
try:
    req = urllib.request.Request(
        "http://127.0.0.1:%(port)d/api/sandbox/plan", method="POST",
        data=json.dumps({"language": "python", "code": "print('self')"}).encode(),
        headers={"Authorization": "token " + token, "Content-Type": "application/json"})
    out["answer"] = urllib.request.urlopen(req, timeout=3).status
except Exception as exc:
    out["answer"] = type(exc).__name__
print(json.dumps(out))
"""


async def test_5_a_snippet_cannot_reach_the_api_to_plan_or_approve(
    api: Api, jp_http_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_TOKEN", nonce("token"))
    before = await api("GET", "api/sandbox/plans")
    result = await attack(api, SELF_APPROVE % {"port": jp_http_port})
    seen = json.loads(result["stdout"])
    assert seen["token_seen"] is False and seen["answer"] != 200
    after = await api("GET", "api/sandbox/plans")
    assert len(after.body["plans"]) == len(before.body["plans"])


# -- 6: persist ---------------------------------------------------------------------------

PERSIST = r"""
import ctypes, os, platform
name = %(name)r
out = {}
for folder in (".", "/tmp", "/dev/shm", "/var/tmp", os.environ.get("HOME", ".")):
    try:
        open(os.path.join(folder, name), "w").write("x")
        out[folder] = "written"
    except OSError as exc:
        out[folder] = type(exc).__name__
nr = {"x86_64": 248, "aarch64": 217}[platform.machine()]  # add_key
libc = ctypes.CDLL(None, use_errno=True)
key = libc.syscall(nr, b"user", name.encode(), b"payload", 7, -4)  # KEY_SPEC_USER_KEYRING
out["add_key"] = [key, ctypes.get_errno()]
print(out)
"""

FIND = r"""
import os
name = %(name)r
print([f for f in (".", "/tmp", "/dev/shm", "/var/tmp", os.environ.get("HOME", "."))
       if os.path.exists(os.path.join(f, name))])
print(name in open("/proc/keys").read())
"""


async def test_6_nothing_of_a_run_persists(api: Api) -> None:
    name = nonce("persist")
    first = await attack(api, PERSIST % {"name": name})
    assert first["exit_code"] == 0, first["stderr"]
    assert "'add_key': [-1, 1]" in first["stdout"]  # EPERM from the seccomp filter
    second = await attack(api, FIND % {"name": name})
    assert second["stdout"] == "[]\nFalse\n"
    for folder in ("/tmp", "/dev/shm", "/var/tmp"):
        assert not (Path(folder) / name).exists()
    assert name not in Path("/proc/keys").read_text()


# -- 7: outlive its run -------------------------------------------------------------------

DAEMON = r"""
import os, subprocess
subprocess.Popen([%(name)r, "600"], executable="/bin/sleep", start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", [%(name)r, "600"])
    os._exit(0)
print("left behind")
"""


async def test_7_daemons_and_double_forks_die_with_the_run(api: Api, reaper: list[str]) -> None:
    name = nonce("daemon")
    reaper.append(name)
    result = await attack(api, DAEMON % {"name": name})
    assert result["stdout"] == "left behind\n"
    deadline = time.monotonic() + 3
    while processes_named(name) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert processes_named(name) == []


# -- 8: exhaust the host ------------------------------------------------------------------

FILL = r"""
import json, os
chunk = b"x" * (1 << 20)
out = {}
for folder in (".", "/tmp", "/dev/shm"):
    total = 0
    try:
        with open(os.path.join(folder, "fill"), "wb", buffering=0) as f:
            for _ in range(4096):
                total += f.write(chunk)
    except OSError as exc:
        out["error"] = type(exc).__name__
    out[folder] = total
    try:
        os.unlink(os.path.join(folder, "fill"))
    except OSError:
        pass
files = 0
try:
    os.mkdir("many")
    for i in range(100000):
        open(f"many/{i}", "w").close()
        files += 1
except OSError as exc:
    out["inode_error"] = type(exc).__name__
out["files"] = files
print(json.dumps(out))
"""


async def test_8_disk_bytes_and_inodes_stop_at_the_cap(api: Api) -> None:
    cap_mb = 32
    answer = await api("PUT", "api/sandbox/config", {"disk_limit_mb": cap_mb})
    assert answer.code == 200, answer.text
    assert "disk-cap" in answer.body["isolation"]
    plan = await api("POST", "api/sandbox/plan", {"language": "python", "code": "1"})
    assert f"writable space capped at {cap_mb} MB" in json.dumps(plan.body["plan"]["checks"])
    free_before = shutil.disk_usage("/tmp").free
    result = await attack(api, FILL, timeout_sec=60)
    assert result["exit_code"] == 0, result["stderr"]
    seen = json.loads(result["stdout"])
    for folder in (".", "/tmp", "/dev/shm"):
        assert 0 < seen[folder] <= cap_mb << 20, seen
    assert seen["error"] == "OSError"
    assert 0 < seen["files"] <= cap_mb * 64, seen
    # Nothing of it reached the host's disk.
    assert shutil.disk_usage("/tmp").free > free_before - (cap_mb << 20)


MEMORY_BOMB = r"""
import json, os, signal, time
# Several processes, each under a per-process limit (rlimit-data), together past the cap.
children = []
for _ in range(%(count)d):
    pid = os.fork()
    if pid == 0:
        held = b"x" * (%(each_mb)d << 20)  # written, so every page is really used
        time.sleep(3)
        os._exit(0)
    children.append(pid)
killed = 0
for pid in children:
    _, status = os.waitpid(pid, 0)
    killed += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
print(json.dumps({"killed": killed}))
"""


async def test_8_a_memory_bomb_of_many_processes_stops_at_the_cap(api: Api) -> None:
    cap_mb, count, each_mb = 64, 4, 32
    answer = await api("PUT", "api/sandbox/config", {"memory_limit_mb": cap_mb})
    assert answer.code == 200, answer.text
    # Only a run cgroup caps a run's total; without one this is disclosed (and shown below).
    require_system(
        "a memory cgroup",
        "cgroup-memory" in answer.body["isolation"],
        "no writable or delegated memory cgroup for this server's user",
    )
    code = MEMORY_BOMB % {"count": count, "each_mb": each_mb}
    result = await attack(api, code, timeout_sec=60)
    seen = json.loads(result["stdout"])
    # From outside: the kernel's OOM kill in the run's cgroup, which the server read.
    assert "memory limit exceeded" in result["stderr"], result
    assert seen["killed"] >= 1, seen
    # The same bomb under rlimits alone: each process stays under its own limit, and
    # together they pass the cap: what status says about a server without cgroups.
    alone = make_backend("bwrap", cgroups=False)
    request = RunRequest(
        language="python",
        code=code,
        timeout_sec=60,
        limits=ResourceLimits(memory_mb=cap_mb),
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
    )
    fallback = await alone.run(request)
    assert "rlimit-data" in fallback.isolation and "cgroup-memory" not in fallback.isolation
    assert json.loads(fallback.stdout) == {"killed": 0}, fallback


# -- 10: break bookkeeping ----------------------------------------------------------------

TREE = r"""
import os
top = os.getcwd()
os.makedirs("deep", exist_ok=True)
os.chdir("deep")
for i in range(1100):
    os.mkdir("d")
    os.chdir("d")
for name in ("-rf", "new\nline", "\udcff\udcfe", " spaced ", "x" * 255):
    open(name, "w").write("odd")
os.chdir(top)
os.makedirs("locked/inner")
open("locked/inner/file", "w").write("x")
os.chmod("locked/inner", 0o500)
os.chmod("locked", 0o500)
print(top)
"""


async def test_10_a_deep_odd_read_only_tree_is_removed_and_the_run_audited(
    api: Api, jp_serverapp: Any
) -> None:
    from gitpilot_jupyter.server.audit import EVENT_KINDS, schema_id

    seen: list[dict[str, Any]] = []

    async def listener(logger: Any, schema_id: str, data: dict[str, Any]) -> None:
        seen.append(data)

    assert "run" in EVENT_KINDS
    jp_serverapp.event_logger.add_listener(schema_id=schema_id("run"), listener=listener)
    result = await attack(api, TREE, timeout_sec=60)
    assert result["exit_code"] == 0, result["stderr"]
    await jp_serverapp.event_logger.gather_listeners()
    assert [e["run_id"] for e in seen] == [result["run_id"]]
    # The run folder goes just after the answer (the run's processes are dead by then).
    folder = Path(result["stdout"].strip())
    deadline = time.monotonic() + 30
    while folder.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not folder.exists()


def test_10_cleanup_of_a_host_folder_cannot_fail(tmp_path: Path) -> None:
    """Without a tmpfs (no bwrap: unshare or none), the tree is on the host disk."""
    from gitpilot_jupyter.sandbox.local.cleanup import remove_tree

    top = tmp_path / "run"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(1100):  # deeper than PATH_MAX allows by path: one fd a level
        os.mkdir("d" * 8, dir_fd=fd)
        child = os.open("d" * 8, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    for name in ("-rf", "new\nline", " spaced ", "x" * 255):
        os.close(os.open(name, os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    os.mkfifo(top / "fifo")
    (top / "link").symlink_to("/etc/passwd")
    (top / "locked" / "inner").mkdir(parents=True)
    (top / "locked" / "inner" / "f").write_text("x")
    (top / "locked" / "inner").chmod(0o000)
    (top / "locked").chmod(0o500)
    assert remove_tree(top) is True
    assert not top.exists() and Path("/etc/passwd").exists()
    assert remove_tree(top) is True  # already gone: still fine


# -- who runs this suite, and what status says about it -----------------------------------


async def test_status_claims_only_what_this_server_can_give(api: Api) -> None:
    expected_uid = os.environ.get("GITPILOT_TEST_UID")
    if expected_uid:  # .ci/run's second pass: an ordinary user in the docker group
        assert os.getuid() == int(expected_uid) != 0
        assert host_can_reach_docker() is not None, "the CI user should be in the docker group"
    status = (await api("GET", "api/sandbox/status")).body
    claimed = set(status["isolation"])
    missing = {u["layer"]: u for u in status["isolation_report"]["unavailable"]}
    assert {"userns", "non-root", "fs-allowlist", "seccomp", "disk-cap"} <= claimed
    if runs_drop_groups():
        assert "no-groups" in claimed and "no-groups" not in missing
    else:
        # Without newuidmap or a subordinate range a run keeps the server's groups:
        # said with what is missing and how to fix it, never claimed.
        assert "no-groups" not in claimed
        assert "supplementary groups" in missing["no-groups"]["reason"]
        assert "usermod --add-subuids" in missing["no-groups"]["fix"]
    # A network-on plan gets its own stack, or is refused (it would share the host's network).
    plan = await api(
        "POST", "api/sandbox/plan", {"language": "python", "code": "1", "allow_network": True}
    )
    if "egress-only" in missing:
        assert plan.code == 409 and plan.body["code"] == "network_unavailable", plan.body
        assert "share the host's network" in plan.body["message"]
    else:
        labels = [c["label"] for c in plan.body["plan"]["checks"]]
        assert "network on: its own stack, the host not reachable" in labels, labels
