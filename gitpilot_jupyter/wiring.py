"""The composition root: the one module that puts faces together.

Faces (CLI, kernel magic, server, widgets, agents) never import each other; an
import contract (``make lint``) holds them to it. Where one face shows or serves
another's work, this module wires them, through a protocol the using face defines:

* ``%load_ext gitpilot_jupyter`` (:func:`load_ipython_extension`): the kernel
  magic gets the ipywidgets cards, panel and progress bars as its
  :class:`~gitpilot_jupyter.kernel.views.NotebookViews`.
* ``jupyter-sandbox`` (:func:`cli_main`): the CLI gets the agents' ``mcp``
  command as one more :class:`~gitpilot_jupyter.cli.CommandGroup`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%sandbox`` and ``%sandbox`` with the notebook views (ipywidgets)."""
    from .kernel.magics import SandboxMagics
    from .widgets.views import WidgetViews

    ipython.register_magics(SandboxMagics(shell=ipython, views=WidgetViews()))


def cli_parser() -> argparse.ArgumentParser:
    """The full ``jupyter sandbox`` parser: the CLI's commands and the agents' ``mcp``."""
    from .agents import command as mcp_command
    from .cli import build_parser

    return build_parser([mcp_command])


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``jupyter sandbox``: the CLI's commands and the agents' ``mcp``; the exit status."""
    from .agents import command as mcp_command
    from .cli import main

    return main(argv, [mcp_command])


if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.exit(cli_main())
