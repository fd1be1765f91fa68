"""The layering rule, beyond the import contracts of `make lint` (lint-imports).

Faces reach the sandbox through the service's methods only: none touches its
stores or the parts it holds, and none imports a private name of another module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gitpilot_jupyter"
FACES = ("server", "client", "kernel", "widgets", "cli", "agents")
#: What the service holds and faces must not reach into: its stores, then its parts.
INSIDES = ("plans", "claims", "workflow", "planner", "executor", "reporter", "backends")


def face_modules() -> list[Path]:
    return sorted(path for face in FACES for path in (PACKAGE / face).rglob("*.py"))


@pytest.mark.parametrize("path", face_modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_faces_use_the_service_not_its_stores_nor_private_names(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in INSIDES:
            problems.append(f"line {node.lineno}: .{node.attr} (inside the service)")
        if isinstance(node, ast.ImportFrom) and (
            node.level > 0 or "gitpilot" in (node.module or "")
        ):
            private = [
                a.name for a in node.names if a.name.startswith("_") and a.name != "__version__"
            ]
            if private:
                problems.append(f"line {node.lineno}: imports private {private} from {node.module}")
    assert not problems, problems


def test_the_contracts_cover_every_face() -> None:
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    layers = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")[
        "layers"
    ]
    named = {part.strip().split(".")[-1] for layer in layers for part in layer.split("|")}
    assert named == {*FACES, "sandbox"}
