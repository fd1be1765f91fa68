"""Saving what a run produced (display images, later its ``out/`` files) on the user's side.

One rule for every face that writes them (the CLI, the magic): everything goes into
one folder the user names (``--output-dir``; by default ``sandbox-out/<run_id>/`` in
the current folder or beside the notebook), **never outside it** and **never over an
existing file unless forced**:

* a name is a relative path of plain parts: no ``..``, no absolute path, no empty or
  ``.`` part, no NUL, each part at most :data:`MAX_NAME_BYTES` bytes;
* no symlink inside the folder is followed (each folder is opened with
  ``O_NOFOLLOW`` relative to its parent; the file is created with ``O_EXCL``), so a
  link planted there cannot lead a write elsewhere;
* with ``force`` an existing *regular* file is replaced (a new file renamed over it,
  never written through); anything else in the way (a link, a folder, a device, a
  FIFO) is refused, forced or not.

A refusal is a :class:`SaveRefused` with one sentence; the caller says it and goes on.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import SandboxError

__all__ = [
    "IMAGE_SUFFIXES",
    "MAX_NAME_BYTES",
    "OUTPUT_ROOT",
    "OutputFolder",
    "SaveRefused",
    "default_output_dir",
    "display_image",
    "safe_parts",
]

#: The folder, under the current one (or the notebook's), that runs save into by default.
OUTPUT_ROOT = "sandbox-out"
#: The longest part of a saved name, in UTF-8 bytes (the usual file system limit).
MAX_NAME_BYTES = 255
#: Image MIME types of display outputs, each with the suffix of the file it is saved as;
#: in order of preference when one output carries several.
IMAGE_SUFFIXES: Mapping[str, str] = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/gif": ".gif",
    "image/svg+xml": ".svg",
}

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class SaveRefused(SandboxError):
    """A file was not saved: its name leaves the folder, or something is in its place."""

    code = "save_refused"


def default_output_dir(run_id: str, base: str | os.PathLike[str] | None = None) -> Path:
    """``sandbox-out/<run_id>/`` under ``base`` (default: the current folder)."""
    return Path(base if base is not None else Path.cwd()) / OUTPUT_ROOT / run_id


def safe_parts(name: str) -> tuple[str, ...]:
    """The parts of ``name``, a relative path staying in its folder (else :class:`SaveRefused`)."""
    if not name or "\x00" in name or name.startswith("/"):
        raise SaveRefused(f"not saved: {name!r} is not a relative file name")
    parts = name.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise SaveRefused(f"not saved: {name!r} would leave its folder or has an empty part")
        if len(part.encode("utf-8", errors="surrogateescape")) > MAX_NAME_BYTES:
            raise SaveRefused(f"not saved: a part of {name!r} is over {MAX_NAME_BYTES} bytes")
    return tuple(parts)


def display_image(item: Mapping[str, Any]) -> tuple[str, bytes] | None:
    """The image a display output carries, as ``(suffix, bytes)``; ``None`` for none.

    PNG, JPEG and GIF come as base64 text (the wire's rule), SVG as its text.
    """
    data = item.get("data")
    if not isinstance(data, Mapping):
        return None
    for mime, suffix in IMAGE_SUFFIXES.items():
        value = data.get(mime)
        if not isinstance(value, str):
            continue
        if mime == "image/svg+xml":
            return suffix, value.encode("utf-8")
        try:
            return suffix, base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            continue  # the server checks base64: not expected, but never a crash here
    return None


class OutputFolder:
    """The folder one run's files are saved into (made on the first write).

    ``root`` is the user's choice and is trusted as given (it may be a link); what is
    written under it never leaves it. ``force``: replace existing regular files.
    """

    def __init__(self, root: str | os.PathLike[str], *, force: bool = False) -> None:
        self.root = Path(root)
        self.force = force

    def write(self, name: str, data: bytes) -> Path:
        """Save ``data`` as ``name`` (``a/b.png`` makes the folder ``a``); answer its path."""
        parts = safe_parts(name)
        path = self.root.joinpath(*parts)
        self.root.mkdir(parents=True, exist_ok=True)
        folder = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            for part in parts[:-1]:
                inner = _enter(folder, part, path)
                os.close(folder)
                folder = inner
            self._write_file(folder, parts[-1], data, path)
        finally:
            os.close(folder)
        return path

    def _write_file(self, folder: int, leaf: str, data: bytes, path: Path) -> None:
        if self.force:
            try:
                present = os.lstat(leaf, dir_fd=folder)
            except FileNotFoundError:
                pass
            else:
                if not stat.S_ISREG(present.st_mode):
                    raise SaveRefused(f"not saved: {path} exists and is not a regular file")
            # A new file renamed over the old one: a link in its place is replaced, never followed.
            temp = f".{leaf[: MAX_NAME_BYTES - 30]}.{secrets.token_hex(6)}.part"
            _write_new(folder, temp, data)
            try:
                os.replace(temp, leaf, src_dir_fd=folder, dst_dir_fd=folder)
            except OSError as exc:
                os.unlink(temp, dir_fd=folder)
                raise SaveRefused(f"not saved: {path}: {exc.strerror}") from None
            return
        try:
            _write_new(folder, leaf, data)
        except FileExistsError:
            raise SaveRefused(f"not saved: {path} already exists (--force replaces it)") from None


def _enter(folder: int, part: str, path: Path) -> int:
    """Open the sub-folder ``part`` of ``folder`` (made if missing), never through a link."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(part, 0o777, dir_fd=folder)
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=folder)
    except OSError:
        raise SaveRefused(f"not saved: {path}: {part!r} is a link or not a folder") from None


def _write_new(folder: int, name: str, data: bytes) -> None:
    """Create ``name`` in ``folder`` (it must not exist) and write ``data`` to it."""
    fd = os.open(name, _NEW_FILE_FLAGS, 0o666, dir_fd=folder)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        os.unlink(name, dir_fd=folder)
        raise
    os.close(fd)
