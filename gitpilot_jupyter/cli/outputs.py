"""A run's display outputs and ``out/`` files in a terminal: saved as files, paths printed.

A terminal cannot show a figure: each image among the outputs is saved into the run's
folder (``--output-dir``, by default ``sandbox-out/<run_id>/`` here; the rule and the
writer are the core's, :mod:`gitpilot_jupyter.sandbox.rich.saving`) and its path is
printed where it came, in order with the snippet's text. Any other output prints its
``text/plain``. The files the run left under ``out/`` are saved there too, under their
own names, once it is over (:meth:`TerminalDisplays.save_files`). Nothing is written
outside the folder, and no file is replaced without ``--force``.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..sandbox.errors import SandboxError
from ..sandbox.results import RunResult
from ..sandbox.rich.saving import OutputFolder, SaveRefused, display_image

__all__ = ["TerminalDisplays"]


def _shown(path: Path) -> str:
    """``path`` relative to the current folder when it is under it (shorter to read)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class TerminalDisplays:
    """Turns each display output of one run into the text a terminal prints for it."""

    def __init__(self, folder: str | os.PathLike[str], *, force: bool = False) -> None:
        self.folder = OutputFolder(folder, force=force)
        #: How many display outputs came (their files are numbered so).
        self.count = 0
        #: The files saved, in order.
        self.saved: list[Path] = []
        #: One sentence per image that was not saved.
        self.refused: list[str] = []

    def text(self, item: dict[str, Any]) -> str:
        """What to print for ``item``: the saved image's path, or its ``text/plain``."""
        self.count += 1
        data = item.get("data") or {}
        image = display_image(item)
        if image is not None:
            suffix, content = image
            try:
                path = self.folder.write(f"display-{self.count}{suffix}", content)
            except SaveRefused as exc:
                self.refused.append(exc.message)
                return f"[image {self.count}: {exc.message}]\n"
            self.saved.append(path)
            return f"[image {self.count}: {_shown(path)}]\n"
        plain = data.get("text/plain")
        if isinstance(plain, str):
            return plain if plain.endswith("\n") else plain + "\n"
        kinds = ", ".join(sorted(data)) or "empty"
        return f"[output {self.count}: {kinds}; no text to show in a terminal]\n"

    async def save_files(
        self, result: RunResult, fetch: Callable[[str, str], Awaitable[bytes]]
    ) -> list[str]:
        """Save each of ``result.files`` (its bytes from ``fetch(run_id, name)``) under its
        own name; a line to print for each saved (its path). What was not saved is in
        :attr:`refused`."""
        lines = []
        for entry in result.files:
            name = entry["name"]
            try:
                path = self.folder.write(name, await fetch(result.run_id, name))
            except SaveRefused as exc:  # (said with the others at the end)
                self.refused.append(exc.message)
                continue
            except SandboxError as exc:  # expired, or the server went away meanwhile
                self.refused.append(f"out/{name} not saved: {exc.message}")
                continue
            self.saved.append(path)
            lines.append(f"[file out/{name}: {_shown(path)}]")
        return lines
