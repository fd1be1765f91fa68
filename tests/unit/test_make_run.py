"""``make run`` installs what running needs and nothing of the test toolchain."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_TOOLS = ("playwright", "schemathesis", "mypy", "ruff", "pytest", "hypothesis", "sphinx")


def extras() -> dict[str, list[str]]:
    """pyproject.toml's extras (each a list of quoted strings; no TOML parser before 3.11)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    found = {}
    for name, body in re.findall(r"^(\w+) = (\[.*?\])[ \t]*$", section, flags=re.M | re.S):
        found[name] = list(ast.literal_eval(re.sub(r"#[^\n]*", "", body)))
    return found


def test_make_run_installs_only_the_run_extras() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    # A dry run of everything `make run` would do on a fresh checkout (-B: as if nothing existed).
    plan = subprocess.run(
        ["make", "-n", "-B", "run"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert plan.returncode == 0, plan.stderr
    installs = [line for line in plan.stdout.splitlines() if "pip install" in line and "-e" in line]
    assert installs == ['.venv/bin/python -m pip install --quiet -e ".[lab,docker]"']
    for name in ("lab", "docker"):
        for requirement in extras()[name]:
            assert not requirement.startswith(TEST_TOOLS), requirement
    # `make test` still gets every tool.
    tests = " ".join(extras()["test"])
    assert all(tool in tests for tool in ("playwright", "schemathesis", "mypy"))
