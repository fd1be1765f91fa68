"""The ``matrixlab`` backend: a MatrixLab Runner runs each snippet in its own container.

Not implemented yet (issue 4): every run reports the Runner as unreachable.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import BackendUnreachable
from ..results import RunResult
from .base import OutputCallback, RunRequest, SandboxBackend


class MatrixLabSandbox(SandboxBackend):
    """Placeholder until the Runner client lands."""

    name: ClassVar[str] = "matrixlab"

    def __init__(self, *, url: str, token: str = "", image: str = "") -> None:
        self.url = url
        self.token = token
        self.image = image

    async def run(self, request: RunRequest, on_output: OutputCallback | None = None) -> RunResult:
        raise BackendUnreachable("the matrixlab backend is not available in this build yet")

    async def health(self) -> dict[str, Any]:
        return {"ok": False, "error": "the matrixlab backend is not available in this build yet"}
