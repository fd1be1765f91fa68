"""Run a command with no system bubblewrap, as after a plain ``pip install`` (run as root).

The command runs in a private mount namespace where ``/dev/null`` is bound over
``/usr/bin/bwrap`` and over every other ``bwrap`` on ``PATH``, so the project sees
a host without bubblewrap while nothing on the host changes. It composes with
``scripts/as_docker_user.py`` (whose own mount namespace copies this one's):

    python scripts/as_pip_only.py -- .venv/bin/python -m pytest tests/hostshapes
    python scripts/as_pip_only.py -- .venv/bin/python scripts/as_docker_user.py -- \
        .venv/bin/python -m pytest tests/hostshapes

``GITPILOT_HOST_SHAPE`` is set to ``pip-only`` for the command (the host-shape suite
then checks that no bwrap is found).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

MARK = "GITPILOT_AS_PIP_ONLY"
SHAPE_ENV = "GITPILOT_HOST_SHAPE"
SYSTEM_BWRAP = Path("/usr/bin/bwrap")


def bwraps_on_path() -> list[Path]:
    """The system bwrap and every ``bwrap`` a ``PATH`` lookup could find, resolved."""
    found = {SYSTEM_BWRAP} if SYSTEM_BWRAP.exists() else set()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / "bwrap"
        if candidate.is_file():
            found.add(candidate)
    # A bind over a symlink lands on its target: cover both ends.
    return sorted(found | {path.resolve() for path in found})


def hide(paths: list[Path]) -> None:
    """Bind ``/dev/null`` over each path, in this mount namespace only."""
    for path in paths:
        subprocess.run(["mount", "--bind", "/dev/null", str(path)], check=True)


def main(argv: list[str]) -> int:
    """Re-exec in a private mount namespace, hide every bwrap, exec the command."""
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    if not command:
        print(__doc__, file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("as_pip_only: run this as root", file=sys.stderr)
        return 2
    if os.environ.get(MARK) != "1":
        unshare = shutil.which("unshare") or "unshare"
        env = {**os.environ, MARK: "1"}
        os.execvpe(
            unshare,
            [unshare, "--mount", "--propagation", "private", "--", sys.executable, *sys.argv],
            env,
        )
    hide(bwraps_on_path())
    if shutil.which("bwrap") is not None:
        print(f"as_pip_only: a bwrap is still found: {shutil.which('bwrap')}", file=sys.stderr)
        return 1
    env = {key: value for key, value in os.environ.items() if key != MARK}
    env[SHAPE_ENV] = "pip-only"
    os.execvpe(command[0], command, env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
