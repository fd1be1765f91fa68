"""The printed launch plan of each engine, compared with the files under ``golden/``.

A plan is built by a pure function of its inputs (here fixed: a fake run folder,
interpreter, credential folders, uids and id map), so a change to the wall (a mount,
an fd, a step, a limit) shows as a diff of one readable file. After an intended
change, write the files again with ``GITPILOT_UPDATE_GOLDEN=1`` and review the diff::

    GITPILOT_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/isolation/test_launch_plan.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.inputs import StagedInput
from gitpilot_jupyter.sandbox.local import bwrapplan, launchplan, nsfree, prestart
from gitpilot_jupyter.sandbox.local.backends import run_command
from gitpilot_jupyter.sandbox.local.bwrapplan import HostFacts
from gitpilot_jupyter.sandbox.local.confine import Confinement, IdMap, View, relocated
from gitpilot_jupyter.sandbox.local.isolation import ISOLATION_ENV
from tests.support.system import require_system

GOLDEN = Path(__file__).with_name("golden")
UPDATE_ENV = "GITPILOT_UPDATE_GOLDEN"
#: Host-specific paths of the inputs and the placeholders the golden files show.
RUN = Path("/tmp/gitpilot-run-abcd1234")
PYTHON = Path("/opt/python3.12")
HOME = Path("/home/alice")
PLACEHOLDERS = {str(RUN): "{RUN}", str(PYTHON): "{PYTHON}", str(HOME): "{HOME}"}
#: The server's uid as a non-root user, its subordinate range (the last ids, the count)
#: and a run's own ids from it (.subids).
SERVER_IDS = (1000, 1000)
RANGE_END = IdMap(165535, 165535, 65536)
MAPPED_IDS = (165527, 165527)
NOBODY = (65534, 65534)
#: A root server's run: an id of its own (nsfree.RUN_IDS).
RUN_IDS = (2_100_000_007, 2_100_000_007)
#: Stand-ins for :func:`.chainsteps.stage_steps` and a run cgroup (a run with a host uid of
#: its own gets its RLIMIT_NPROC there: counted from its own user namespaces).
FIRST = (
    "echo 0 >/sys/fs/cgroup/gitpilot/gitpilot-run-0123456789ab/cgroup.procs",
    "ulimit -p 32",
    "ulimit -f 262144",
    "ulimit -t 30",
)
WALLED_LIMITS = (
    "write 0 to /sys/fs/cgroup/gitpilot/gitpilot-run-0123456789ab/cgroup.procs",
    "setrlimit(RLIMIT_FSIZE, 268435456)",
    "setrlimit(RLIMIT_CPU, 30)",
)
BLOCKED = ("10.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.2.10/32", "192.168.0.0/16")
MODES = ("cold", "warm", "prestart")
#: The server's matplotlib font list (.mplfonts): the interpreter has matplotlib.
FONT_LIST = HOME / ".cache/gitpilot-jupyter/matplotlib/0123456789abcdef01234567/fontlist-v390.json"
#: A cold bwrap run handed inputs (their verified copies, in the server's folder of the run).
INPUTS = (
    StagedInput("sales.csv", "file", Path("/tmp/gitpilot-sandbox-inputs/in/sales.csv")),
    StagedInput("data", "dir", Path("/tmp/gitpilot-sandbox-inputs/in/data")),
)


def _view(python: Path = PYTHON) -> View:
    return View(
        interpreters=[python],
        cover_dirs=[HOME / ".ssh", HOME / ".local/share/jupyter"],
        cover_files=[HOME / ".netrc"],
    )


def _chain(who: str) -> Confinement:
    tools = ("/usr/bin/slirp4netns", "/usr/bin/nsenter", "/usr/sbin/ip")
    if who == "root":
        return Confinement(
            "/usr/bin/bwrap", "/usr/bin/unshare", "/usr/bin/setpriv", net_tools=tools
        )
    return Confinement(
        "/usr/bin/bwrap", "/usr/bin/unshare", "/usr/bin/setpriv", net_tools=tools, idmap=RANGE_END
    )


def bwrap_plan(
    who: str, network: str, mode: str, python: Path = PYTHON, view: View | None = None
) -> launchplan.LaunchPlan:
    """The bwrap engine's plan of a python run for these inputs (``python``: the
    interpreter's folder; ``view``: else the golden files' one)."""
    facts = HostFacts(
        system=(("/usr", None), ("/bin", "usr/bin"), ("/lib", "usr/lib"), ("/etc", None)),
        resolv=None,
        stage_target="/mnt",
        sandbox_ids=RUN_IDS if who == "root" else NOBODY,
        cgroup_ns=True,
        blocked=BLOCKED if network == "on" else (),
        snippet=None if mode == "prestart" else "inline.py",
        snippet_fifo=mode == "warm",
        prestarted=mode == "prestart",
        server_ids=(0, 0) if who == "root" else SERVER_IDS,
        mapped_ids=None if who == "root" else MAPPED_IDS,
        font_list=str(FONT_LIST),
    )
    return bwrapplan.plan(
        _chain(who),
        run_command("python", str(python / "bin/python3"), "inline.py"),
        workdir=RUN,
        allow_network=network == "on",
        view=view or _view(python),
        disk_mb=256,
        bpf=b"\0" * 64,
        facts=facts,
        egress=True,
        first=FIRST,
        inputs=INPUTS if mode == "inputs" else (),
    )


def landlock_plan(who: str, network: str, mode: str = "cold") -> launchplan.LaunchPlan:
    """The namespace-free engine's plan of a python run for these inputs; a warm slot's
    shell is the one the pool starts (:func:`.nsfree.slot_argv`)."""
    argv = run_command("python", str(PYTHON / "bin/python3"), "inline.py")
    slot = [] if mode == "cold" else nsfree.slot_argv(argv, prestarted=mode == "prestart", env={})
    rules = launchplan.Rules(
        execute=("/usr", str(PYTHON)),
        read=("/etc/hosts", "/etc/passwd", "/etc/ssl/certs"),
        write=(str(RUN),),
        devices=("/dev/null", "/dev/zero", "/dev/urandom"),
        deny_tcp=network == "off",
        scoped=True,
    )
    root = who == "root"
    return launchplan.walled_plan(
        argv,
        rules=rules,
        seccomp=launchplan.SECCOMP_WALLED if network == "off" else launchplan.SECCOMP_WALLED_INET,
        limits=WALLED_LIMITS,
        ids=(2_100_000_000, 2_100_000_000) if root else SERVER_IDS,
        dropped=root,
        network="none: no AF_INET/AF_INET6 sockets, TCP denied by Landlock"
        if network == "off"
        else "the host's network (an administrator's opt-in)",
        slot=slot[: -len(argv)],
        hook=f"{nsfree.PRESTART_DIR}/{prestart.HOOK_MODULE}.py" if mode == "prestart" else None,
    )


def printed(plan: launchplan.LaunchPlan) -> str:
    """``plan`` rendered, host-specific paths as placeholders."""
    text = launchplan.render(plan)
    for path, placeholder in PLACEHOLDERS.items():
        text = text.replace(path, placeholder)
    return text


CASES = [
    *(
        ("bwrap", who, net, mode)
        for who in ("root", "user")
        for net in ("off", "on")
        for mode in (*MODES, "inputs")
    ),
    *(
        ("landlock", who, net, mode)
        for who in ("root", "user")
        for net in ("off", "on")
        for mode in MODES
    ),
]


def _plan(engine: str, who: str, network: str, mode: str) -> launchplan.LaunchPlan:
    if engine == "bwrap":
        return bwrap_plan(who, network, mode)
    return landlock_plan(who, network, mode)


@pytest.mark.parametrize(("engine", "who", "network", "mode"), CASES)
def test_the_printed_plan_is_the_golden_one(engine: str, who: str, network: str, mode: str) -> None:
    text = printed(_plan(engine, who, network, mode))
    golden = GOLDEN / f"{engine}-{who}-net-{network}-{mode}.txt"
    if os.environ.get(UPDATE_ENV) == "1":
        golden.write_text(text)
    assert golden.is_file(), f"no {golden.name}: write it with {UPDATE_ENV}=1"
    assert text == golden.read_text(), f"the plan changed: review, then {UPDATE_ENV}=1"


def test_every_golden_file_is_a_case() -> None:
    names = {f"{e}-{w}-net-{n}-{m}.txt" for e, w, n, m in CASES}
    assert {p.name for p in GOLDEN.glob("*.txt")} == names


def test_the_staging_script_opens_only_the_table_fds() -> None:
    """The fds the staging script (chain/stage.sh) opens are those of the one table."""
    script = launchplan.stage_script()
    code = "\n".join(line.split("#")[0] for line in script.splitlines())
    used = {int(n) for n in re.findall(r"(?<![\w$=-])([3-9])(?:<>|<&|>&|<|>)", code)}
    assert used == {fd.number for fd in launchplan.FDS}, used


@pytest.mark.parametrize(("engine", "who", "network", "mode"), CASES)
def test_each_fd_has_one_number_and_one_job(engine: str, who: str, network: str, mode: str) -> None:
    plan = _plan(engine, who, network, mode)
    # The inputs' fd is closed before net-ready takes its number (see launchplan.INPUTS).
    numbers = [fd.number for fd, _ in plan.fds if fd is not launchplan.INPUTS]
    assert len(set(numbers)) == len(numbers), plan.fds  # each opened once, for one job
    assert {fd for fd, _ in plan.fds} <= {*launchplan.FDS, launchplan.INPUTS}


def test_the_hook_file_names_the_table_fds() -> None:
    """The hook file, read on its own, says the fds the chain gives it."""
    text = prestart.HOOK_SOURCE.read_text()
    assert f"CODE_FD = {launchplan.CODE.number}\n" in text
    assert f"RUN_STDOUT_FD = {launchplan.RUN_STDOUT.number}\n" in text
    assert f"RUN_STDERR_FD = {launchplan.RUN_STDERR.number}\n" in text
    source = prestart.hook_source("inline.py")
    compile(source, "sitecustomize.py", "exec")
    assert "SNIPPET = 'inline.py'\n" in source


def test_the_plan_is_the_argv_started(tmp_path: Path) -> None:
    """On this host the chain's argv is its plan's, and executing the plan writes what
    the staging shell reads (the fstab with the run's tmpfs, the seccomp filter)."""
    chain = _chain("root")
    view = View(interpreters=[], cover_dirs=[], cover_files=[])
    (tmp_path / "inline.py").write_text("print(1)")
    argv = ["python3", "inline.py"]
    facts = bwrapplan.host_facts(chain, argv, workdir=tmp_path, view=view, blocked=False)
    plan = bwrapplan.plan(
        chain,
        argv,
        workdir=tmp_path,
        allow_network=False,
        view=view,
        disk_mb=64,
        bpf=b"\0" * 8,
        facts=facts,
    )
    assert not (tmp_path / ".stage.fstab").exists()  # building it touched nothing
    started = bwrapplan.command(
        chain, argv, workdir=tmp_path, allow_network=False, view=view, disk_mb=64, bpf=b"\0" * 8
    )
    assert started == plan.argv()
    assert "size=64m" in (tmp_path / ".stage.fstab").read_text()
    assert (tmp_path / ".seccomp.bpf").read_bytes() == b"\0" * 8


def show_launch(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """``jupyter sandbox debug --show-launch ARGS`` as a user runs it; nothing may be
    left in its temp dir (no run folder is made)."""
    cli = str(Path(sys.executable).parent / "jupyter-sandbox")
    tmp = tmp_path / "tmp"
    tmp.mkdir(parents=True)
    full = {**os.environ, "TMPDIR": str(tmp), **(env or {})}
    proc = subprocess.run(
        [cli, "debug", "--show-launch", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(tmp.iterdir()) == []
    return proc.stdout


def test_show_launch_prints_the_bwrap_chain_in_force(
    tmp_path: Path, sandbox_config_dir: Path
) -> None:
    require_system("bwrap", shutil.which("bwrap") is not None, "install bubblewrap")
    off = show_launch(tmp_path / "off", env={ISOLATION_ENV: "bwrap"})
    assert off.startswith("engine: bwrap\n"), off
    assert "--unshare-net" in off and "--seccomp 3" in off
    assert "--ro-bind /dev/null /etc/shadow\n" in off
    prefix = Path(sys.prefix).resolve()  # the interpreter's installation is in the view
    assert any(line.endswith(f" {relocated(prefix)}") for line in off.splitlines()), off
    on = show_launch(tmp_path / "on", "--network", env={ISOLATION_ENV: "bwrap"})
    assert "     --unshare-net\n" not in on  # (the option's line; "refused here" names it)
    assert "network: egress only" in on or "refused here" in on, on


def test_show_launch_prints_the_landlock_rules(tmp_path: Path, sandbox_config_dir: Path) -> None:
    if nsfree.detect()[0] is None:
        pytest.skip(f"the namespace-free engine is not available here: {nsfree.detect()[1]}")
    text = show_launch(tmp_path, env={ISOLATION_ENV: "landlock"})
    assert text.startswith("engine: landlock\n") or "refused here" in text, text
    assert "landlock_restrict_self" in text and "tcp bind/connect: denied" in text
    write = text.split("  write:\n", 1)[1].splitlines()[0].strip()
    assert write.startswith(str(tmp_path / "tmp")), text  # only the run folder
