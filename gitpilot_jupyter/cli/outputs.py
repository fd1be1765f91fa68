"""A run's display outputs in a terminal: images saved as files, the rest as text.

A terminal cannot show a figure: each image among the outputs is saved into the run's
folder (``--output-dir``, by default ``sandbox-out/<run_id>/`` here; the rule and the
writer are the core's, :mod:`gitpilot_jupyter.sandbox.rich.saving`) and its path is
printed where it came, in order with the snippet's text. Any other output prints its
``text/plain``. Nothing is written outside the folder, and no file is replaced
without ``--force``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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
