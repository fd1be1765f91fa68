"""The environment ``make run`` gives, emulated inside this test virtualenv.

``make run`` installs the package with the extras its Makefile rule names (no test tools).
A fresh virtualenv would need the package registries (tests reach only loopback), so the
notebooks run in this one with everything ``make run`` would not install hidden: a
``sitecustomize`` on ``PYTHONPATH`` refuses to import the top-level modules of every other
distribution, as if it were missing. Same versions as this virtualenv, nothing more.
"""

from __future__ import annotations

import importlib.metadata as metadata
import os
import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
#: What a virtualenv holds before anything is installed into it (the Makefile upgrades pip).
BARE_VENV = ("pip",)

SITECUSTOMIZE = '''"""Written by tests/notebooks/make_run_env.py: what make run installs, only."""
import sys

HIDDEN = frozenset({hidden!r})


class NotInstalledByMakeRun:
    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            why = f"No module named {{name!r}} (make run does not install it)"
            raise ModuleNotFoundError(why, name=name)
        return None


sys.meta_path.insert(0, NotInstalledByMakeRun)
'''


def run_extras() -> list[str]:
    """The extras the Makefile's ``make run`` install line names (``.[lab,docker]``)."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    rule = makefile.split("$(RUN_STAMP):", 1)[1].split("\n\n", 1)[0]
    found = re.search(r'pip install [^\n]*-e "\.\[([\w,-]+)\]"', rule)
    assert found, "the Makefile's make-run rule installs no extras this test can read"
    return found.group(1).split(",")


def _requirements(extras: list[str]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = list(project["dependencies"])
    for extra in extras:
        names += project["optional-dependencies"][extra]
    return [Requirement(name) for name in names]


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def installed_by_make_run() -> set[str]:
    """The (canonical) names of the distributions ``make run`` installs: its closure."""
    wanted = [(r, set(r.extras)) for r in _requirements(run_extras()) if _applies(r, set())]
    found = {canonicalize_name("gitpilot-jupyter"), *BARE_VENV}
    seen: set[tuple[str, frozenset[str]]] = set()
    while wanted:
        requirement, extras = wanted.pop()
        dist = metadata.distribution(requirement.name)  # missing here: the test cannot emulate it
        key = canonicalize_name(dist.metadata["Name"])
        if (key, frozenset(extras)) in seen:
            continue
        seen.add((key, frozenset(extras)))
        found.add(key)
        for line in dist.requires or []:
            sub = Requirement(line)
            if _applies(sub, extras):
                wanted.append((sub, set(sub.extras)))
    return found


def hidden_modules() -> set[str]:
    """Top-level modules of this virtualenv that no distribution ``make run`` installs provides."""
    allowed = installed_by_make_run()
    return {
        module
        for module, dists in metadata.packages_distributions().items()
        if not any(canonicalize_name(dist) in allowed for dist in dists)
    }


def make_run_env(folder: Path) -> dict[str, str]:
    """Environment variables that give a kernel (or a server) only what ``make run`` installs."""
    folder.mkdir(parents=True, exist_ok=True)
    source = SITECUSTOMIZE.format(hidden=sorted(hidden_modules()))
    (folder / "sitecustomize.py").write_text(source, encoding="utf-8")
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([str(folder), *([path] if path else [])])}
