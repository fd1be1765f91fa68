"""``debug --show-launch``: the launch plan the subprocess backend's engine would use now."""

from __future__ import annotations

import sys

from ..local.layered import LayeredIsolator
from ..local.showplan import show_launch
from ..service import SandboxService
from .isolation import _local


def launch_text(service: SandboxService, *, allow_network: bool = False) -> str:
    """The plan of a python run now (``allow_network``: a network-on one), as text."""
    backend = _local(service)
    isolator = backend.isolator
    if not isinstance(isolator, LayeredIsolator):
        return f"isolator: {type(isolator).__name__}: no launch plan to show\n"
    python = backend.interpreters.resolve("python") or sys.executable
    return show_launch(isolator, python, allow_network=allow_network)
