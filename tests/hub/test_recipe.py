"""The page's Kubernetes values carry the same server configuration as the tested file."""

from __future__ import annotations

from pathlib import Path

from tests.support.hub import CHECKOUT, RECIPE

PAGE = CHECKOUT / "docs" / "admin" / "jupyterhub.md"


def sandbox_lines(text: str) -> list[str]:
    """The ``c.SandboxApp.*`` assignments of ``text``, stripped, in order."""
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if line.startswith("c.SandboxApp.")]


def test_the_charts_extra_file_is_the_tested_recipe() -> None:
    page = PAGE.read_text(encoding="utf-8")
    values = page[page.index("extraFiles:") : page.index("```", page.index("extraFiles:"))]
    tested = sandbox_lines(Path(RECIPE).read_text(encoding="utf-8"))
    assert tested, f"no c.SandboxApp lines in {RECIPE}"
    assert sandbox_lines(values) == tested
