"""The isolation stages of ``debug``: which layers work here, and proof that they hold.

``isolation layers`` reads the isolator's report: a missing namespace tool on
Linux is a failure with its install command. ``isolation check`` runs a probe
snippet that looks at its own namespaces, mounts, cgroups and rlimits, and
fails when a claimed layer is not really in force.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from typing import Any

from ..local.backends import BASE_LAYERS, SubprocessSandbox
from ..local.layered import LayeredIsolator
from ..service import SandboxService
from .stage import FAIL, PASS, Stage

NAMESPACE_TOOLS = ("bwrap", "unshare")
#: Layer -> the namespace whose inode must differ from the server's.
NS_FILES = {"pidns": "pid", "ipcns": "ipc", "utsns": "uts", "netns": "net"}
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
facts["hidden-credentials"] = all(
    not os.path.isdir(p) or not os.listdir(p) for p in args["hidden"]
)
try:
    groups = open("/proc/self/cgroup").read().splitlines()
except OSError:
    groups = []
def in_run_cgroup(ctrl):
    return any("gitpilot-run-" in g and (ctrl in g.split(":")[1] or g.startswith("0::"))
               for g in groups)
facts["cgroup-memory"] = in_run_cgroup("memory")
facts["cgroup-pids"] = in_run_cgroup("pids")
try:
    import resource
    for layer, name in args["rlimits"].items():
        facts[layer] = resource.getrlimit(getattr(resource, name))[1] != resource.RLIM_INFINITY
except ImportError:
    pass
facts["tempdir"] = os.path.basename(os.getcwd()).startswith("gitpilot-sandbox-")
print(json.dumps(facts))
"""


def _local(probe: SandboxService) -> SubprocessSandbox:
    backend = probe.backend("subprocess", probe.settings.effective().settings)
    assert isinstance(backend, SubprocessSandbox)
    return backend


async def isolation_layers(probe: SandboxService) -> Stage:
    """The layers in force here; FAIL when Linux has no namespace tool (with the fix)."""
    name = "isolation layers"
    backend = _local(probe)
    report: dict[str, Any] = backend.isolator.report()
    layers = backend.isolation(allow_network=False)
    missing = report.get("unavailable", [])
    gaps = "; ".join(f"{u['layer']}: {u['reason']}" for u in missing)
    detail = f"in force: {', '.join(layers)}" + (f"; missing: {gaps}" if gaps else "")
    choice = report.get("choice", "auto")
    tools = [u for u in missing if u["layer"] in NAMESPACE_TOOLS]
    wanted = {"auto": "bwrap", "bwrap": "bwrap", "unshare": "unshare"}.get(choice)
    broken = [u for u in tools if u["layer"] == wanted]
    if sys.platform == "linux" and broken:
        return Stage(name, FAIL, detail, broken[0]["fix"])
    return Stage(name, PASS, detail)


async def isolation_check(probe: SandboxService) -> Stage:
    """Run a probe snippet and check every claimed layer against what it observes."""
    name = "isolation check"
    backend = _local(probe)
    isolator = backend.isolator
    hidden = isolator.hidden_paths()[0] if isinstance(isolator, LayeredIsolator) else []
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    try:
        with tempfile.NamedTemporaryFile(prefix="gitpilot-debug-") as marker:
            args = {
                "ns": NS_FILES,
                "host_ns": {ns: _readlink(f"/proc/self/ns/{ns}") for ns in NS_FILES.values()},
                "port": server.sockets[0].getsockname()[1],
                "marker": marker.name,
                "hidden": [str(p) for p in hidden],
                "rlimits": RLIMITS,
            }
            _, result = await probe.run_approved_here(
                language="python",
                code=PROBE.format(args=json.dumps(args)),
                backend="subprocess",
                allow_network=False,
                timeout_sec=30,
            )
    finally:
        server.close()
    if not result.ok:
        return Stage(
            name,
            FAIL,
            f"the probe failed: exit {result.exit_code}: {result.stderr.strip()[-300:]}",
            "jupyter sandbox status",
        )
    facts: dict[str, bool] = json.loads(result.stdout)
    claimed = [layer for layer in result.isolation if layer != BASE_LAYERS[1]]
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


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""
