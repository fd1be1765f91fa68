"""gitpilot-jupyter: a safe, configurable code sandbox for Jupyter.

One runtime contract (plan -> approve -> run) for notebooks, JupyterLab,
the CLI and agents. See :mod:`gitpilot_jupyter.sandbox` for the core.
"""

from __future__ import annotations

from typing import Any

from ._version import __version__

__all__ = ["__version__"]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """Entry point for jupyter_server: the sandbox REST API."""
    from .server.app import SandboxApp

    return [{"module": "gitpilot_jupyter.server.app", "app": SandboxApp}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """Where the built JupyterLab extension lives."""
    return [{"src": "labextension", "dest": "gitpilot-jupyter"}]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext gitpilot_jupyter``: register ``%%sandbox`` and ``%sandbox``.

    The wiring of the magic with its notebook views is the composition root's
    (:mod:`gitpilot_jupyter.wiring`).
    """
    from .wiring import load_ipython_extension as wire

    wire(ipython)
