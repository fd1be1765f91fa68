"""A run's /tmp is private and empty whatever path the server's interpreter has.

A checkout (and its venv) under /tmp used to show in every bwrap run's /tmp: the
interpreter's folder was bound back at its own path there. Here a server runs from a
venv made under /tmp, cold and warm, and its runs list their /tmp, /var/tmp and
/dev/shm.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import gitpilot_jupyter
from gitpilot_jupyter.sandbox.local.confine import RELOCATED, View

from .conftest import require_mechanism
from .test_launch_plan import PYTHON, bwrap_plan

#: What the server in the /tmp venv runs: a cold run, then a warm one; what each saw.
SERVER = """
import asyncio, json, sys
from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.pool import PoolConfig

LOOK = '''
import json, os, sys
print(json.dumps({"tmp": os.listdir("/tmp"), "var_tmp": os.listdir("/var/tmp"),
    "shm": os.listdir("/dev/shm"), "here": os.path.basename(os.getcwd()),
    "prefix": sys.prefix, "jupyter": os.listdir(sys.prefix + "/share/jupyter")}))
'''

async def main():
    out = []
    for mode in ("off", "always"):  # a cold run, then a warm slot's
        backend = SubprocessSandbox(isolator=LayeredIsolator("bwrap"), pool=PoolConfig(mode=mode))
        try:
            result = await backend.run(RunRequest(language="python", code=LOOK, timeout_sec=30))
        finally:
            await backend.aclose()
        out.append({"warm": result.warm, "exit": result.exit_code, "pool": backend.pool_error(),
                    "stdout": result.stdout, "stderr": result.stderr[-500:]})
    print(json.dumps({"prefix": sys.prefix, "runs": out}))

asyncio.run(main())
"""


@pytest.fixture
def venv_in_tmp() -> Iterator[Path]:
    """A venv under /tmp (as a checkout's there would be) that imports what this one does."""
    top = Path(tempfile.mkdtemp(prefix="gp-checkout-", dir="/tmp"))
    try:
        venv = top / ".venv"
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run(
            [base, "-m", "venv", "--without-pip", "--symlinks", str(venv)],
            check=True,
            timeout=120,
        )
        (packages,) = venv.glob("lib/python*/site-packages")
        (packages / "outer.pth").write_text("\n".join(site.getsitepackages()) + "\n")
        # Jupyter's folder in the venv (jupyter_path() has it): hidden from every run.
        (venv / "share" / "jupyter").mkdir(parents=True)
        (venv / "share" / "jupyter" / "secret.json").write_text("{}")
        yield venv
    finally:
        shutil.rmtree(top, ignore_errors=True)


def test_a_servers_interpreter_under_tmp_leaves_the_runs_tmp_empty(venv_in_tmp: Path) -> None:
    require_mechanism("bwrap")
    checkout = Path(gitpilot_jupyter.__file__).parent.parent
    done = subprocess.run(
        [str(venv_in_tmp / "bin" / "python"), "-c", SERVER],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "PYTHONPATH": str(checkout), "TMPDIR": "/tmp"},
        cwd="/",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["prefix"] == str(venv_in_tmp)  # the server's interpreter is under /tmp
    runs = seen["runs"]
    cold, warm = runs
    assert not cold["warm"] and (warm["warm"] or warm["pool"] is not None), runs
    for run in runs:
        assert run["exit"] == 0, run["stderr"]
        inside = json.loads(run["stdout"])
        # Only the run folder's own mount point (named per run, the snippet's cwd):
        # nothing of the checkout, the venv or the host's /tmp.
        assert inside["tmp"] == [inside["here"]], inside
        assert inside["here"].startswith("gitpilot-sandbox-"), inside
        assert inside["var_tmp"] == inside["tmp"] and inside["shm"] == [], inside
        # The snippet ran on the server's own interpreter, seen below RELOCATED.
        assert inside["prefix"] == RELOCATED + str(venv_in_tmp), inside
        assert inside["jupyter"] == [], inside  # covered where the run sees it


@pytest.mark.parametrize("who", ["root", "user"])
def test_the_plan_binds_an_interpreter_under_tmp_below_relocated(who: str) -> None:
    """The launch plan says it: the folder bound below RELOCATED, the command with it, a
    hidden folder inside it covered there, nothing bound into the run's /tmp; an
    interpreter elsewhere stays at its own path."""
    venv = Path("/tmp/gp-checkout/.venv")
    jupyter = venv / "share/jupyter"  # (jupyter_path() hides sys.prefix's share/jupyter)
    view = View(interpreters=[venv], cover_dirs=[jupyter], cover_files=[venv / "etc/token"])
    plan = bwrap_plan(who, "off", "cold", python=venv, view=view)
    assert plan.command[0] == f"{RELOCATED}{venv}/bin/python3", plan.command
    bound = [m.target for m in plan.mounts if m.op == "--ro-bind"]
    moved = {f"{RELOCATED}{venv}", f"{RELOCATED}{jupyter}", f"{RELOCATED}{venv}/etc/token"}
    assert moved <= set(bound) and not any(t.startswith("/tmp") for t in bound), bound
    covers = [m.source for m in plan.mounts if m.target == f"{RELOCATED}{jupyter}"]
    assert covers == ["/mnt/empty"], covers  # (after the folder's own bind: it covers it)
    elsewhere = bwrap_plan(who, "off", "cold")
    assert elsewhere.command[0] == str(PYTHON / "bin/python3")
    assert str(PYTHON) in [m.target for m in elsewhere.mounts if m.op == "--ro-bind"]
