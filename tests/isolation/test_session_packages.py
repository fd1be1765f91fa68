"""pip in a session: a package lands in the session's own folder and goes with it.

No package index is reached: the cell writes a wheel of its own (a zip with its metadata) and
installs that file, as pip installs one from an index once it has it.
"""

from __future__ import annotations

import importlib.util
import sys

from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.sessions import SessionManager
from gitpilot_jupyter.sandbox.sessions.boot import PIP_OFFLINE_NOTE

from .sessionkit import cell, start_request, with_sessions

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
done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", {what!r}],
                      capture_output=True, text=True)
print("pip exit", done.returncode)
print(done.stdout[-1500:], done.stderr[-1500:], file=sys.stderr)
"""


def test_pip_installs_into_the_sessions_folder_and_it_goes_with_the_session(
    bwrap: SubprocessSandbox,
) -> None:
    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request())
        made = await manager.run_cell(cell("nb", MAKE_WHEEL), user=None)
        assert made.result.exit_code == 0, made.result.stderr
        wheel = f"{PACKAGE}-1.0-py3-none-any.whl"
        installed = await manager.run_cell(
            cell("nb", PIP.format(what=wheel), timeout_sec=60), user=None
        )
        assert "pip exit 0" in installed.result.stdout, installed.result.stderr
        # The kernel imports it, and so does a subprocess of the cell.
        probe = (
            f"import {PACKAGE}, os, subprocess, sys\n"
            f"print({PACKAGE}.VALUE, os.path.relpath({PACKAGE}.__file__))\n"
            f"print(subprocess.run([sys.executable, '-c', 'import {PACKAGE}'],"
            " capture_output=True).returncode)"
        )
        used = await manager.run_cell(cell("nb", probe), user=None)
        assert used.result.stdout == f"42 .packages/{PACKAGE}/__init__.py\n0\n", used.result.stderr
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
            cell("nb", PIP.format(what=f"{PACKAGE}-from-an-index"), timeout_sec=60), user=None
        )
        assert "pip exit 1" in direct.result.stdout, direct.result.stderr
        assert "Retrying" not in direct.result.stderr, direct.result.stderr

    with_sessions(bwrap, body)
