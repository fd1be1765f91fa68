"""The isolation stages of ``debug``: which layers work here, and proof that they hold.

``isolation layers`` reads the isolator's report: a missing namespace tool on
Linux is a failure with its install command. ``isolation check`` runs a probe
snippet that looks at its own namespaces, mounts, cgroups and rlimits, and
fails when a claimed layer is not really in force.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path

from ..local import cgroups
from ..local.backends import BASE_LAYERS, SubprocessSandbox
from ..local.blockednets import blocked_networks
from ..local.chainsteps import SHELL
from ..local.confine import SYSTEM_DIRS
from ..local.isolation import HOST_NETWORK_LAYER, UNCONTAINED_LAYER
from ..local.layered import LayeredIsolator
from ..request import RunOptions
from ..service import SandboxService
from .stage import FAIL, PASS, SKIP, Stage, run_probe

NAMESPACE_TOOLS = ("bwrap", "unshare")
#: Layer -> the namespace whose inode must differ from the server's.
NS_FILES = {"pidns": "pid", "ipcns": "ipc", "utsns": "uts", "netns": "net", "cgroupns": "cgroup"}
RLIMITS = {
    "rlimit-data": "RLIMIT_DATA",
    "rlimit-nproc": "RLIMIT_NPROC",
    "rlimit-fsize": "RLIMIT_FSIZE",
    "rlimit-cpu": "RLIMIT_CPU",
}

# Runs inside the sandbox: reports what it can observe about its own isolation.
PROBE = r"""
import json, os, socket
args = json.loads({args!r})
facts = {{}}
for layer, ns in args["ns"].items():
    try:
        facts[layer] = os.readlink("/proc/self/ns/" + ns) != args["host_ns"][ns]
    except OSError:
        facts[layer] = False
if "netns" in facts:
    try:
        socket.create_connection(("127.0.0.1", args["port"]), timeout=2).close()
        facts["netns"] = False
    except OSError:
        pass
try:
    roots = [l.split() for l in open("/proc/self/mountinfo") if l.split()[4] == "/"]
    facts["ro-root"] = "ro" in roots[-1][5].split(",")
except (OSError, IndexError):
    facts["ro-root"] = False
facts["private-tmp"] = not os.path.exists(args["marker"])
def reachable(path):
    # Landlock leaves a path visible to stat but refuses to open it: only what opens counts.
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").close()
        return True
    except OSError:
        return False
def listing(path):
    try:
        return set(os.listdir(path))
    except OSError:
        return set()
facts["hidden-credentials"] = all(not listing(p) for p in args["hidden"])
try:
    # Only a Landlock domain refuses to list "/", which every user may read.
    os.listdir("/")
    facts["landlock"] = False
except PermissionError:
    facts["landlock"] = True
# The run's cgroups are checked from outside (its own cgroup namespace shows "/").
try:
    import resource
    for layer, name in args["rlimits"].items():
        facts[layer] = resource.getrlimit(getattr(resource, name))[1] != resource.RLIM_INFINITY
except ImportError:
    pass
facts["tempdir"] = os.path.basename(os.getcwd()).startswith("gitpilot-sandbox-")
facts["userns"] = os.readlink("/proc/self/ns/user") != args["host_ns"]["user"]
# What an attacker tries: the server's home, host sockets, /sys, an unexpected top folder.
home = args["home"]
facts["fs-allowlist"] = (
    not any(reachable(p) for p in args["forbidden"])
    and listing("/") <= set(args["top"])
    and listing(home) <= set(args["home_kept"])
)
wrote = []
for path in ("/proc/sys/kernel/core_pattern", "/proc/sysrq-trigger"):
    try:
        os.close(os.open(path, os.O_WRONLY))  # opened, never written: nothing changes
        wrote.append(path)
    except OSError:
        pass
facts["proc-sys-ro"] = not wrote
import ctypes, errno, platform
keyctl = {{"x86_64": 250, "aarch64": 219}}.get(platform.machine())
if keyctl is not None:
    libc = ctypes.CDLL(None, use_errno=True)
    # keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0): allowed unless filtered.
    denied = libc.syscall(keyctl, 0, -3, 0) == -1 and ctypes.get_errno() == errno.EPERM
    facts["seccomp"] = denied
    # PR_GET_NO_NEW_PRIVS (39): 1 once set; nothing can unset it.
    facts["no-new-privs"] = libc.prctl(39, 0, 0, 0, 0) == 1
try:
    socket.socket().close()
    facts["net-denied"] = False
except OSError:
    try:
        socket.create_connection(("127.0.0.1", args["port"]), timeout=2).close()
        facts["net-denied"] = False
    except OSError:
        facts["net-denied"] = True
try:
    os.kill(args["server_pid"], 0)
    facts["signal-scope"] = False
except PermissionError:
    facts["signal-scope"] = True
except OSError:
    facts["signal-scope"] = False
child = os.fork()
if child == 0:
    try:
        os.setsid()
        os._exit(1)
    except OSError:
        os._exit(0)
facts["session-kill"] = os.waitpid(child, 0)[1] == 0
cap = args["disk_mb"] * 1024 * 1024
def capped(path):
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize <= cap and 0 < st.f_files <= args["disk_mb"] * 64
facts["disk-cap"] = all(capped(p) for p in (".", "/tmp", "/dev/shm"))
# Seen from outside: the host reads this process's credentials while it sleeps.
import shutil, subprocess
found = shutil.which("sleep") or next(
    (p for p in ("/usr/bin/sleep", "/bin/sleep") if os.path.exists(p)), None
)
if found:
    sleeper = subprocess.Popen([args["nonce"], "20"], executable=found)
    try:
        sleeper.wait(timeout=15)
    except subprocess.TimeoutExpired:
        sleeper.kill()
print(json.dumps(facts))
"""


def _local(probe: SandboxService) -> SubprocessSandbox:
    backend = probe.backends.backend("subprocess", probe.settings.effective().settings)
    assert isinstance(backend, SubprocessSandbox)
    return backend


async def isolation_layers(probe: SandboxService) -> Stage:
    """The layers in force here; FAIL when Linux has no namespace tool (with the fix)."""
    name = "isolation layers"
    backend = _local(probe)
    report = backend.isolator.report()
    layers = backend.isolation(allow_network=False)
    missing = report.get("unavailable", [])
    gaps = "; ".join(f"{u['layer']}: {u['reason']}" for u in missing)
    detail = f"in force: {', '.join(layers)}" + (f"; missing: {gaps}" if gaps else "")
    detail = f"engine {report.get('engine', 'none')}; {detail}"
    refusal = backend.isolator.refusal()
    if refusal is not None:
        accepted = " (accepted by the administrator)" * backend.isolator.allow_uncontained
        return Stage(name, FAIL, f"{refusal['reason']}{accepted}; {detail}", refusal["fix"])
    memory = next((g for g in backend.isolator.gaps() if g["layer"] == "cgroup-memory"), None)
    if memory is not None:
        return Stage(name, FAIL, f"{memory['reason']}; {detail}", memory["fix"])
    return Stage(name, PASS, detail)


async def cgroup_join_stage(probe: SandboxService) -> Stage:
    """What joining its run cgroup adds to a cold run's start, measured; the fix when slow."""
    name = "run cgroup join"
    isolator = _local(probe).isolator
    tree = isolator.cgroup_tree() if isinstance(isolator, LayeredIsolator) else None
    if tree is None:
        return Stage(name, SKIP, "runs get no cgroup here (see isolation layers)")
    cost = await asyncio.to_thread(cgroups.join_cost_ms, tree, SHELL)
    detail = (
        f"cgroup v{tree.version}: +{cost:.1f} ms to each cold run's start "
        "(a warm slot pays it ahead)"
    )
    if cost < cgroups.SLOW_JOIN_MS:
        return Stage(name, PASS, detail)
    # Slow, not broken: runs work, so this passes, with the way to speed it up in view.
    return Stage(
        name,
        PASS,
        f"{detail}: the kernel waits for an RCU grace period at each join; "
        f"to avoid it, {cgroups.SLOW_JOIN_FIX}",
    )


async def isolation_check(probe: SandboxService) -> Stage:
    """Run a probe snippet and check every claimed layer against what it observes."""
    name = "isolation check"
    backend = _local(probe)
    isolator = backend.isolator
    hidden = isolator.hidden_paths()[0] if isinstance(isolator, LayeredIsolator) else []
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    nonce = f"gitpilot-probe-{secrets.token_hex(8)}"
    watcher = asyncio.ensure_future(asyncio.to_thread(_credentials_of, nonce))
    try:
        with tempfile.NamedTemporaryFile(prefix="gitpilot-debug-") as marker:
            args = {
                "ns": NS_FILES,
                "host_ns": {
                    ns: _readlink(f"/proc/self/ns/{ns}") for ns in [*NS_FILES.values(), "user"]
                },
                "port": server.sockets[0].getsockname()[1],
                "marker": marker.name,
                "hidden": [str(p) for p in hidden],
                "rlimits": RLIMITS,
                "forbidden": _forbidden(),
                "top": _allowed_top(),
                "home": str(Path.home()),
                "home_kept": _kept_in_home(),
                "disk_mb": probe.settings.effective().settings.disk_limit_mb,
                "nonce": nonce,
                "server_pid": os.getpid(),
            }
            result = await run_probe(
                probe,
                RunOptions(
                    language="python",
                    code=PROBE.format(args=json.dumps(args)),
                    backend="subprocess",
                    allow_network=False,
                    timeout_sec=30,
                ),
            )
    finally:
        server.close()
        _STOP.add(nonce)
    creds = await watcher
    if not result.ok:
        return Stage(
            name,
            FAIL,
            f"the probe failed: exit {result.exit_code}: {result.stderr.strip()[-300:]}",
            "jupyter sandbox status",
        )
    facts: dict[str, bool] = json.loads(result.stdout)
    if creds is not None:
        facts["non-root"] = "0" not in creds["Uid"] + creds["Gid"]
        facts["own-uid"] = str(os.geteuid()) not in creds["Uid"]
        facts["no-groups"] = not creds["Groups"]
        for layer in ("cgroup-memory", "cgroup-pids"):
            facts[layer] = in_run_cgroup(creds["cgroup"], layer.split("-")[1])
    # The markers of what a run did without (accepted by the administrator) claim nothing.
    markers = {BASE_LAYERS[1], UNCONTAINED_LAYER, HOST_NETWORK_LAYER}
    claimed = [layer for layer in result.isolation if layer not in markers]
    checked = [layer for layer in claimed if layer in facts]
    broken = [layer for layer in checked if not facts[layer]]
    if broken:
        return Stage(
            name,
            FAIL,
            f"claimed but not in force: {', '.join(broken)}",
            "report this as a bug; meanwhile GITPILOT_SANDBOX_ISOLATION=none "
            "or the matrixlab backend",
        )
    unchecked = [layer for layer in claimed if layer not in facts]
    detail = f"verified: {', '.join(checked) or 'nothing to verify'}"
    if unchecked:
        detail += f"; not checkable from inside: {', '.join(unchecked)}"
    return Stage(name, PASS, detail)


#: Nonces whose watcher should stop looking (the probe run is over).
_STOP: set[str] = set()


def in_run_cgroup(lines: list[str], controller: str) -> bool:
    """True when ``/proc/PID/cgroup`` ``lines`` (as the host reads them) put the process in
    a run cgroup of ``controller`` (cgroup v2 has one line, ``0::PATH``, for all)."""
    return any(
        "gitpilot-run-" in line
        and (controller in line.split(":")[1].split(",") or line.startswith("0::"))
        for line in lines
    )


def _credentials_of(nonce: str, timeout: float = 20.0) -> dict[str, list[str]] | None:
    """The host's view of the probe's sleeper (``Uid``, ``Gid``, ``Groups`` of
    ``/proc/PID/status``, and its ``cgroup`` lines), found by its argv[0]; it is then
    killed. None if never seen."""
    deadline = time.monotonic() + timeout
    needle = nonce.encode()
    while time.monotonic() < deadline and nonce not in _STOP:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                if not Path(f"/proc/{entry}/cmdline").read_bytes().startswith(needle + b"\0"):
                    continue
                status = Path(f"/proc/{entry}/status").read_text()
                cgroup = Path(f"/proc/{entry}/cgroup").read_text().splitlines()
            except OSError:
                continue
            found = {
                key: line.split(":", 1)[1].split()
                for line in status.splitlines()
                for key in ("Uid", "Gid", "Groups")
                if line.startswith(key + ":")
            }
            found["cgroup"] = cgroup
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)
            return found
        time.sleep(0.05)
    _STOP.discard(nonce)
    return None


def _forbidden() -> list[str]:
    """Paths a run must not see: host sockets, /sys, the server's home and Jupyter's files."""
    paths = ["/run", "/var/run", "/sys", "/var/lib"]
    if os.environ.get("XDG_RUNTIME_DIR"):
        paths.append(os.environ["XDG_RUNTIME_DIR"])
    with contextlib.suppress(ImportError):
        from jupyter_core.paths import jupyter_runtime_dir

        paths.append(jupyter_runtime_dir())
    return [p for p in paths if p != "/"]


def _kept_in_home() -> list[str]:
    """Names in the home folder a run may see: only the way to an interpreter bound back."""
    home = Path.home().resolve()
    kept = set()
    for path in (sys.prefix, sys.base_prefix):
        real = Path(path).resolve()
        if home in real.parents:
            kept.add(real.relative_to(home).parts[0])
    return sorted(kept)


def _allowed_top() -> list[str]:
    """Top-level names a run's root may hold: system folders, its mounts, interpreters."""
    top = {Path(d).name for d in SYSTEM_DIRS} | {"dev", "proc", "tmp", "var"}
    for path in (sys.prefix, sys.base_prefix, sys.executable, tempfile.gettempdir()):
        parts = Path(path).resolve().parts
        if len(parts) > 1:
            top.add(parts[1])
    return sorted(top)


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


# Runs inside a network-on run: the host's loopback and its own address must not answer.
EGRESS_PROBE = r"""
import json, socket
out = {{}}
for name, host in (("loopback", "127.0.0.1"), ("host address", {host!r})):
    if host is None:
        continue
    try:
        socket.create_connection((host, {port}), timeout=3).close()
        out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
print(json.dumps(out))
"""


def _host_address() -> str | None:
    """One address of this host other than loopback (what a network-on run must not reach)."""
    for entry in blocked_networks():
        if entry.endswith("/32"):
            return entry[:-3]
    return None


async def egress_check(probe: SandboxService) -> Stage:
    """With network on, a run reaches neither the host's loopback nor its own address."""
    name = "network-on check"
    backend = _local(probe)
    if "egress-only" not in backend.isolation(allow_network=True):
        missing = [
            u
            for u in backend.isolator.report().get("unavailable", [])
            if u["layer"] == "egress-only"
        ]
        if missing:
            return Stage(name, SKIP, missing[0]["reason"], missing[0]["fix"])
        return Stage(name, SKIP, "no user-mode networking claimed here")
    server = await asyncio.start_server(lambda r, w: w.close(), "0.0.0.0", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        result = await run_probe(
            probe,
            RunOptions(
                language="python",
                code=EGRESS_PROBE.format(host=_host_address(), port=port),
                backend="subprocess",
                allow_network=True,
                timeout_sec=30,
            ),
        )
    finally:
        server.close()
    if not result.ok:
        return Stage(
            name, FAIL, f"the probe failed: exit {result.exit_code}", "jupyter sandbox status"
        )
    seen: dict[str, str] = json.loads(result.stdout)
    reached = [where for where, what in seen.items() if what == "connected"]
    if reached:
        return Stage(
            name,
            FAIL,
            f"egress-only claimed, but a network-on run reached the host's {', '.join(reached)}",
            "report this as a bug; meanwhile keep network off",
        )
    return Stage(
        name, PASS, f"verified egress-only: {', '.join(f'{k} {v}' for k, v in seen.items())}"
    )
