"""pip in a session: a package lands in the session's own folder and goes with it.

The first test reaches no package index: the cell writes a wheel of its own (a zip with its
metadata) and installs that file. The network-on test installs from a package index: one the
test serves in its own network world (:mod:`tests.containment.world`), beyond the world's
"host", where a small server side (this module run as ``python -m``) holds the session.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from gitpilot_jupyter.sandbox.errors import ContainmentUnavailable
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.sessions import SessionManager
from gitpilot_jupyter.sandbox.sessions.boot import PACKAGES_DIR, PIP_OFFLINE_NOTE
from tests.containment.world import World, world

from .sessionkit import ROOT, alive, cell, start_request, with_sessions

__all__ = ["world"]  # the fixture

PACKAGE = "gitpilot_session_probe"
#: A cell that writes a wheel of PACKAGE (version 1.0) into its folder.
MAKE_WHEEL = f"""
import base64, hashlib, zipfile
name, dist = {PACKAGE!r}, {PACKAGE!r} + "-1.0.dist-info"
files = {{
    name + "/__init__.py": "VALUE = 42\\n",
    dist + "/METADATA": "Metadata-Version: 2.1\\nName: " + name + "\\nVersion: 1.0\\n",
    dist + "/WHEEL": "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\n"
    "Tag: py3-none-any\\n",
}}
def digest(text):
    raw = hashlib.sha256(text.encode()).digest()
    return "sha256=" + base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
record = "".join(f"{{p}},{{digest(t)}},{{len(t.encode())}}\\n" for p, t in files.items())
files[dist + "/RECORD"] = record + dist + "/RECORD,,\\n"
with zipfile.ZipFile(name + "-1.0-py3-none-any.whl", "w") as wheel:
    for path, text in files.items():
        wheel.writestr(path, text)
"""
#: pip as a cell's subprocess would run it (``!pip`` and ``%pip`` run the same).
PIP = """
import subprocess, sys
done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", *{args!r}],
                      capture_output=True, text=True)
print("pip exit", done.returncode)
print(done.stdout[-1500:], done.stderr[-1500:], file=sys.stderr)
"""

#: The cell that shows where the package was imported from, by the kernel and a subprocess.
PROBE = (
    f"import {PACKAGE}, os, subprocess, sys\n"
    f"print({PACKAGE}.VALUE, os.path.relpath({PACKAGE}.__file__))\n"
    f"print(subprocess.run([sys.executable, '-c', 'import {PACKAGE}'],"
    " capture_output=True).returncode)"
)


def test_pip_installs_into_the_sessions_folder_and_it_goes_with_the_session(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        made = await manager.run_cell(cell("nb", MAKE_WHEEL), user=None)
        assert made.result.exit_code == 0, made.result.stderr
        wheel = f"{PACKAGE}-1.0-py3-none-any.whl"
        installed = await manager.run_cell(
            cell("nb", PIP.format(args=[wheel]), timeout_sec=60), user=None
        )
        assert "pip exit 0" in installed.result.stdout, installed.result.stderr
        # The kernel imports it, and so does a subprocess of the cell.
        used = await manager.run_cell(cell("nb", PROBE), user=None)
        assert used.result.stdout == f"42 {PACKAGES_DIR}/{PACKAGE}/__init__.py\n0\n", (
            used.result.stderr
        )
        # Another session has not got it, nor has the server's environment.
        await manager.start("other", owner=None, request=start_request())
        other = await manager.run_cell(cell("other", f"import {PACKAGE}"), user=None)
        assert "ModuleNotFoundError" in other.result.stderr
        assert importlib.util.find_spec(PACKAGE) is None, sys.path
        # Restarted, the session is without it: it went with its folder.
        await manager.restart("nb", user=None)
        again = await manager.run_cell(cell("nb", f"import {PACKAGE}"), user=None)
        assert "ModuleNotFoundError" in again.result.stderr

    with_sessions(bwrap, body)


def test_pip_with_the_network_off_says_why_and_how_to_ask_for_network(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        asked = await manager.run_cell(
            cell("nb", f"%pip install {PACKAGE}-from-an-index", timeout_sec=60), user=None
        )
        assert PIP_OFFLINE_NOTE in asked.result.stderr, asked.result.stderr
        # pip itself asks no index (it fails at once, not after its retries).
        direct = await manager.run_cell(
            cell("nb", PIP.format(args=[f"{PACKAGE}-from-an-index"]), timeout_sec=60), user=None
        )
        assert "pip exit 1" in direct.result.stdout, direct.result.stderr
        assert "Retrying" not in direct.result.stderr, direct.result.stderr

    with_sessions(bwrap, body)


def test_pip_installs_from_an_index_with_the_network_on_and_it_goes_with_the_session(
    bwrap: SubprocessSandbox, world: World
) -> None:
    # The world's index: simple/NAME/ links a wheel built here (pip asks for the normalized name).
    project = Path(world.files_dir, "simple", PACKAGE.replace("_", "-"))
    project.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", MAKE_WHEEL], cwd=project, check=True)
    wheel = f"{PACKAGE}-1.0-py3-none-any.whl"
    (project / "index.html").write_text(f'<a href="{wheel}">{wheel}</a>\n')
    index = f"http://{world.web_addr}:{world.files_port}/simple/"
    # The session's server side runs in the world's "host": its traffic goes out from there.
    argv = [sys.executable, "-m", __name__, index, world.web_addr]
    if not world.entered:
        argv[:0] = ["ip", "netns", "exec", world.host_ns]
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    if "refused" in seen:
        # No stack of its own here (a user without /dev/net/tun): the start is refused up
        # front, with nothing of the session left (as test_session_walls checks).
        assert seen["refused"] == seen["expected"] == "network_unavailable", seen
        assert seen["left"] == [], seen
        return
    assert "egress-only" in seen["isolation"], seen
    assert "pip exit 0" in seen["pip"], seen["pip_stderr"]
    # A later cell imports it from the session's folder, and so does its subprocess.
    assert seen["probe"] == f"42 {PACKAGES_DIR}/{PACKAGE}/__init__.py\n0\n", seen
    assert seen["server_has_it"] is False
    # After the stop: no folder, no kernel.
    assert seen["folder_during"] is True and seen["folder_after"] is False, seen
    assert seen["kernel_after"] is False, seen
    assert not alive(seen["kernel_pid"])


async def _install_from(index: str, host: str) -> dict[str, object]:
    """The server side of the network-on test: a session, pip from ``index``, the stop."""
    backend = SubprocessSandbox(isolator=LayeredIsolator("bwrap"))
    manager = SessionManager(backend)
    seen: dict[str, object] = {}
    try:
        refused = backend.refusal(allow_network=True)
        if refused is not None:
            seen["expected"] = refused.code
            try:
                await manager.start("nb", owner=None, request=start_request(network=True))
            except ContainmentUnavailable as failed:
                seen["refused"] = failed.code
            seen["left"] = manager.list()
            return seen
        info = await manager.start("nb", owner=None, request=start_request(network=True))
        seen["isolation"] = info["isolation"]
        kernel = manager._sessions[(None, "nb")].kernel
        folder = str(kernel.workdir)
        seen["kernel_pid"] = kernel.kernel_pid
        args = ["--index-url", index, "--trusted-host", host, PACKAGE]
        pip = dataclasses.replace(cell("nb", PIP.format(args=args), timeout_sec=120), network=True)
        installed = await manager.run_cell(pip, user=None)
        seen["pip"], seen["pip_stderr"] = installed.result.stdout, installed.result.stderr
        used = await manager.run_cell(
            dataclasses.replace(cell("nb", PROBE), network=True), user=None
        )
        seen["probe"] = used.result.stdout + used.result.stderr
        seen["server_has_it"] = importlib.util.find_spec(PACKAGE) is not None
        seen["folder_during"] = os.path.lexists(folder)
        await manager.stop("nb", user=None)
        seen["folder_after"] = os.path.lexists(folder)
        seen["kernel_after"] = alive(kernel.kernel_pid)
        return seen
    finally:
        await manager.aclose()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_install_from(sys.argv[1], sys.argv[2]))))
