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


#: The faces proper: they never import each other (``client`` is the layer under them).
INDEPENDENT = ("cli", "kernel", "server", "widgets", "agents")
#: The only modules that may import several faces: the package's entry points and the
#: composition root they delegate to.
COMPOSITION_ROOTS = {"gitpilot_jupyter", "gitpilot_jupyter.wiring"}


def contracts() -> list[dict[str, object]]:
    import tomllib

    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8"))
    found: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return found


def test_the_contracts_cover_every_face() -> None:
    layers = next(
        c for c in contracts() if c["type"] == "layers" and "gitpilot_jupyter.wiring" in c["layers"]
    )["layers"]
    assert isinstance(layers, list)
    named = {part.strip().split(".")[-1] for layer in layers for part in layer.split("|")}
    assert named == {*FACES, "sandbox", "wiring"}
    independent = next(c for c in contracts() if c["type"] == "independence")["modules"]
    assert independent == [f"gitpilot_jupyter.{face}" for face in INDEPENDENT]


def test_only_the_composition_root_imports_several_faces() -> None:
    import grimp

    graph = grimp.build_graph("gitpilot_jupyter")
    faces = [f"gitpilot_jupyter.{face}" for face in INDEPENDENT]

    def face_of(module: str) -> str | None:
        return next((f for f in faces if module == f or module.startswith(f + ".")), None)

    joiners = {}
    for module in graph.modules:
        imported = {face_of(m) for m in graph.find_modules_directly_imported_by(module)}
        imported.discard(None)
        imported.discard(face_of(module))
        if imported:
            joiners[module] = sorted(str(f) for f in imported)
    assert set(joiners) == COMPOSITION_ROOTS, joiners
    # The root wires the kernel with the widgets and the CLI with the agents.
    assert {"gitpilot_jupyter.kernel", "gitpilot_jupyter.widgets"} <= set(
        joiners["gitpilot_jupyter.wiring"]
    )
    assert {"gitpilot_jupyter.cli", "gitpilot_jupyter.agents"} <= set(
        joiners["gitpilot_jupyter.wiring"]
    )
