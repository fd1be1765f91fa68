"""Files out: what a run leaves under ``out/`` in its folder, and the rules for it.

Every run folder has an empty ``out/`` when the run starts. After the run the
backend collects what is under it (:mod:`.local.outfiles` on the local engines):
regular files only, no symlink followed, no device, FIFO or socket, at most
:attr:`OutCaps.max_files` files and :attr:`OutCaps.max_bytes` bytes in all. The
result lists each kept file (:class:`OutFile`); its bytes are kept by the service
for the run's owner (:mod:`.service.outstore`). The caps' defaults are here, and only
here; plans show them (:func:`plan_check`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from .errors import InvalidRequest
from .records import Check

#: The folder, in every run folder, whose files come back.
OUT_DIR = "out"
#: How many files of ``out/`` a run may hand back.
DEFAULT_MAX_OUT_FILES = 1000
#: How many bytes, all files together.
DEFAULT_MAX_OUT_BYTES = 64 * 1024 * 1024
#: How deep below ``out/`` the collection looks (each level holds one fd while walked).
MAX_OUT_DEPTH = 16
#: The longest name (relative to ``out/``) a file may have.
MAX_OUT_NAME_CHARS = 1024


class OutFile(TypedDict):
    """One collected file in the result: its name relative to ``out/``, size, content hash."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class OutCaps:
    """The caps on what a run hands back from ``out/`` (a policy setting)."""

    max_files: int = DEFAULT_MAX_OUT_FILES
    max_bytes: int = DEFAULT_MAX_OUT_BYTES

    def __post_init__(self) -> None:
        if self.max_files < 0 or self.max_bytes < 0:
            raise ValueError("the caps of out/ cannot be negative")

    def label(self) -> str:
        """``up to 1000 files, 64 MiB in all``: what plans and docs say."""
        return f"up to {self.max_files} files, {human_bytes(self.max_bytes)} in all"


def human_bytes(size: int) -> str:
    """``512 bytes``, ``12.3 KiB``, ``64 MiB``: a size for messages."""
    if size < 1024:
        return f"{size} bytes"
    value, unit = (size / 1024, "KiB") if size < 1024 * 1024 else (size / 1024 / 1024, "MiB")
    return f"{value:.1f}".removesuffix(".0") + f" {unit}"


def check_out_name(name: object) -> str:
    """``name`` when it can name a file of ``out/``: relative, ``/``-separated parts,
    none empty, ``.`` or ``..``, no NUL or backslash; else :class:`InvalidRequest`.

    What the collection produces always passes; a caller's name (the download route,
    a saved file) is checked with it before it is looked up.
    """
    if not isinstance(name, str) or not name or len(name) > MAX_OUT_NAME_CHARS:
        raise InvalidRequest("a file name of out/ must be a non-empty relative path")
    parts = name.split("/")
    if (
        name.startswith("/")
        or "\x00" in name
        or "\\" in name
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise InvalidRequest(f"{name!r} is not a file name of out/ (relative, no '..')")
    return name


def plan_check(backend: str, caps: OutCaps, *, collected: bool, session: bool = False) -> Check:
    """The plan's line on files out: what comes back and its caps, or that nothing does
    (``session``: a session's cell hands back what it wrote or changed under ``out/``)."""
    if not collected:
        return {"label": f"files out: {OUT_DIR}/ is not handed back on {backend}", "ok": False}
    if session:
        return {
            "label": f"files out: what this cell writes or changes under {OUT_DIR}/ is "
            f"handed back, {caps.label()}",
            "ok": True,
        }
    return {"label": f"files out: {OUT_DIR}/ handed back, {caps.label()}", "ok": True}
