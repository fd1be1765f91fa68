"""Run a command as an unprivileged user in the ``docker`` group (run as root, e.g. from CI).

That is how most people run Jupyter, and it is where a user namespace alone does
not help: the kernel keeps the user's supplementary groups. The user (default
``gitpilot-ci``) is created when missing, added to ``docker`` and given subordinate
uid and gid ranges (``/etc/subuid``, ``/etc/subgid``, for newuidmap/newgidmap), so
its runs can drop those groups, and a cgroup v1 ``memory`` and ``pids`` cgroup of
its own (``gitpilot-USER`` below this process's cgroup, owned by the user) named by
``GITPILOT_SANDBOX_CGROUP``, so its runs get memory and process caps: as an
administrator would set it up. A folder of the user's inside the command's venv
(``var/gitpilot-test-USER``, named by :data:`VISIBLE_ENV`) is for tests that need to
write in a tree the runs see.

The checkout's ``.venv`` links into an interpreter that may sit under a folder the
user cannot search (``/root`` is 0700, with pyenv in it). Nothing on the host is
changed for that: the command runs in a private mount namespace where each such
folder is replaced by a 0755 tmpfs holding binds of just the paths needed.

    python scripts/as_docker_user.py -- .venv/bin/python -m pytest tests/containment

With ``--stay-root`` the command keeps root, in the same private mount namespace with the
interpreter's folders opened up: the shape of a root server whose Python every user may
enter (the namespace-free engine's runs drop to a uid of their own, which must start it).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

USER = os.environ.get("GITPILOT_TEST_USER", "gitpilot-ci")
MARK = "GITPILOT_AS_DOCKER_USER"
#: Names a folder inside the interpreter's folder (a tree every run sees, read-only) that the
#: user may write: the checkout's root-owned venv has none, and the tests of hidden folders
#: replaced on the host make theirs there (tests/containment/test_redteam_pool.py).
VISIBLE_ENV = "GITPILOT_TEST_VISIBLE_FOLDER"


def ensure_user() -> pwd.struct_passwd:
    """The test user, created (no home, no login) and put in the docker group."""
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True
        )
        entry = pwd.getpwnam(USER)
    if subprocess.run(["getent", "group", "docker"], capture_output=True).returncode == 0:
        subprocess.run(["usermod", "-aG", "docker", USER], check=True)
    add_subordinate_ranges(entry)
    return entry


def add_subordinate_ranges(entry: pwd.struct_passwd) -> None:
    """Give the user a subordinate uid and gid range where it has none (``usermod``)."""
    from gitpilot_jupyter.sandbox.local.confine import (
        SUBGID_FILE,
        SUBID_COUNT,
        SUBUID_FILE,
        free_subordinate_start,
        subordinate_range,
    )

    options = []
    for path, option in ((SUBUID_FILE, "--add-subuids"), (SUBGID_FILE, "--add-subgids")):
        if subordinate_range(path, entry.pw_name, entry.pw_uid) is None:
            start = free_subordinate_start()
            options += [option, f"{start}-{start + SUBID_COUNT - 1}"]
    if options:
        subprocess.run(["usermod", *options, entry.pw_name], check=True)


def delegate_cgroup(entry: pwd.struct_passwd) -> str | None:
    """A cgroup of the user's own in each cgroup v1 memory/pids hierarchy; its path.

    Made below this process's cgroup (so what contains this one contains it) and
    owned by the user, who makes its runs' cgroups in it. None on a host without
    those v1 hierarchies (cgroup v2 wants the server inside its delegated cgroup).
    """
    from gitpilot_jupyter.sandbox.local import cgroups

    name = f"gitpilot-{entry.pw_name}"
    own = cgroups._own_paths()
    made = []
    for point, fstype, options in cgroups._mounts():
        controller = next((c for c in ("memory", "pids") if c in options), None)
        if fstype != "cgroup" or controller is None:
            continue
        folder = Path(point + own.get(controller, "/")) / name
        folder.mkdir(exist_ok=True)
        os.chown(folder, entry.pw_uid, entry.pw_gid)
        made.append(controller)
    return name if {"memory", "pids"} <= set(made) else None


#: Set to 1: /dev/net/tun is usable by everyone in the command's mount namespace, as on a
#: stock Debian or Ubuntu (mode 0666); some hosts (this project's CI machine) make it 0600.
TUN_ENV = "GITPILOT_TEST_OPEN_TUN"


def open_tun() -> None:
    """Cover /dev/net/tun with a mode 0666 node of the same device, in this mount namespace."""
    tun = Path("/dev/net/tun")
    if not tun.exists() or stat.S_IMODE(tun.stat().st_mode) & 0o006 == 0o006:
        return
    folder = Path(tempfile.mkdtemp(prefix="gitpilot-tun-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(folder)], check=True)
    node = folder / "tun"
    os.mknod(node, stat.S_IFCHR | 0o666, tun.stat().st_rdev)
    node.chmod(0o666)
    subprocess.run(["mount", "--bind", str(node), str(tun)], check=True)


def searchable_by_others(path: Path) -> bool:
    """True when a user who is neither owner nor in the group can enter ``path``."""
    return bool(path.stat().st_mode & stat.S_IXOTH)


def open_up(needed: list[Path]) -> None:
    """Make every ancestor of ``needed`` searchable, in this mount namespace only."""
    done: set[Path] = set()
    for _ in range(64):  # each round opens one folder; deeper ones show up afterwards
        blocked = next(
            (
                ancestor
                for path in needed
                for ancestor in reversed(path.parents)
                if ancestor not in done and not searchable_by_others(ancestor)
            ),
            None,
        )
        if blocked is None:
            return
        done.add(blocked)
        children = sorted(
            {path.relative_to(blocked).parts[0] for path in needed if blocked in path.parents}
        )
        stage = Path(tempfile.mkdtemp(prefix="gitpilot-open-"))
        subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(stage)], check=True)
        for child in children:
            source = blocked / child
            target = stage / child
            if source.is_dir():
                target.mkdir()
            else:
                target.touch()
            subprocess.run(["mount", "--bind", str(source), str(target)], check=True)
        subprocess.run(["mount", "--rbind", str(stage), str(blocked)], check=True)


def main(argv: list[str]) -> int:
    """Re-exec in a private mount namespace, open the needed paths, drop to the user."""
    stay_root = "--stay-root" in argv[: argv.index("--")] if "--" in argv else False
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("as_docker_user: run this as root", file=sys.stderr)
        return 2
    if os.environ.get(MARK) != "1":
        entry = ensure_user()
        unshare = shutil.which("unshare") or "unshare"
        env = {**os.environ, MARK: "1", "GITPILOT_TEST_UID": str(entry.pw_uid)}
        delegated = None if stay_root else delegate_cgroup(entry)
        if delegated is not None:
            env.setdefault("GITPILOT_SANDBOX_CGROUP", delegated)
        os.execvpe(
            unshare,
            [unshare, "--mount", "--propagation", "private", "--", sys.executable, *sys.argv],
            env,
        )
    entry = pwd.getpwnam(USER)
    checkout = Path.cwd().resolve()
    python = Path(command[0]).resolve() if "python" in command[0] else Path(sys.executable)
    prefix, _, base = (
        subprocess.run(
            [str(command[0]), "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
            capture_output=True,
            text=True,
            check=False,
        )
        .stdout.strip()
        .partition("\n")
    )
    needed = [checkout, python.parent] + ([Path(base).resolve()] if base else [])
    open_up(needed)
    if os.environ.get(TUN_ENV) == "1":
        open_tun()
    if stay_root:
        env = {key: value for key, value in os.environ.items() if key != MARK}
        os.execvpe(command[0], command, env)
    home = Path(tempfile.mkdtemp(prefix="gitpilot-user-home-"))
    os.chown(home, entry.pw_uid, entry.pw_gid)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in (MARK, "HOME", "USER", "LOGNAME", "XDG_RUNTIME_DIR")
    }
    env.update(HOME=str(home), USER=USER, LOGNAME=USER, PYTHONDONTWRITEBYTECODE="1")
    if prefix:
        visible = Path(prefix) / "var" / f"gitpilot-test-{USER}"
        visible.mkdir(parents=True, exist_ok=True)
        os.chown(visible, entry.pw_uid, entry.pw_gid)
        env[VISIBLE_ENV] = str(visible)
    setpriv = shutil.which("setpriv") or "setpriv"
    drop = [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups", "--"]
    os.execvpe(setpriv, [*drop, *command], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
