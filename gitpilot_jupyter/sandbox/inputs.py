"""Files in: the files and folders a caller hands a run (``--input PATH``, REST ``inputs``).

At plan time :func:`resolve_inputs` finds each path under the root folder, walks a
folder without following a symlink out of the chosen tree (one that points outside is
refused, named), refuses anything but regular files and folders, checks the caps
(:class:`InputCaps`, the policy's) on the sizes before reading a byte, then hashes the
content: the plan lists each input and its digest binds names, kinds, sizes and hashes.

At run time :func:`stage_inputs` copies each input into a private folder of the server
while hashing what it copies: what the run sees is what was approved, or the run is
refused (``approval_mismatch``) before it starts. The original is only ever opened for
reading; the engines then show the copy to the run read-only where they can.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from .display import escape_text
from .errors import ApprovalError, InputRefused, InvalidRequest

#: The bytes all of a run's inputs may hold together, by default (the policy's cap).
MAX_INPUT_BYTES = 100_000_000
#: The regular files all of a run's inputs may hold together, by default (the policy's cap).
MAX_INPUT_FILES = 1000
#: Names an input may not take in the run folder: ``out/`` (what the run hands back) and
#: the mark every run folder holds on the host (``.owner``, see :mod:`.local.cleanup`).
RESERVED_NAMES = frozenset({"out", ".owner"})
#: The folder of the verified copies, in the server's private folder of one run.
STAGED_DIR = "in"
#: The bytes read at a time while hashing or copying.
_CHUNK = 1 << 20
#: Open flags of an input's file: never a symlink swapped in, never a FIFO's blocking open.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)

InputKind = Literal["file", "dir"]


@dataclass(frozen=True)
class InputCaps:
    """The caps on what a run's inputs hold together: bytes and regular files."""

    max_bytes: int = MAX_INPUT_BYTES
    max_files: int = MAX_INPUT_FILES

    def describe(self) -> str:
        """The caps as a plan shows them."""
        return f"at most {human_size(self.max_bytes)} and {self.max_files} files in all"


@dataclass(frozen=True)
class RunInput:
    """One input, resolved: the ``name`` it gets in the run folder, its ``kind``, its
    ``size`` (a folder's: its files' bytes), ``sha256`` (``sha256:`` + hex; a folder's:
    over its sorted ``relpath\\0size\\0hex`` lines), its regular ``files`` and, not
    hashed, where it is on the host (``path``) and how the caller named it (``given``)."""

    name: str
    kind: InputKind
    size: int
    sha256: str
    files: int = 1
    #: None for an input known from a plan's JSON only: it cannot be staged here.
    path: Path | None = field(default=None, compare=False)
    given: str = field(default="", compare=False)

    def digest_entry(self) -> list[Any]:
        """What the plan's digest binds of this input."""
        return [self.name, self.kind, self.size, self.sha256]

    def to_dict(self) -> dict[str, Any]:
        """The input as plans show it (the host path stays on the server)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "size": self.size,
            "sha256": self.sha256,
            "files": self.files,
        }

    def label(self) -> str:
        """The plan's line: ``input data.csv · 12.3 kB · sha256:ab12cd34ef56…``."""
        files = f"{self.files} file{'s' * (self.files != 1)}"
        name = escape_text(self.name)  # a file's name is the user's, not always plain
        what = f"{name}/ ({files})" if self.kind == "dir" else name
        return f"input {what} · {human_size(self.size)} · {self.sha256[:19]}…"


@dataclass(frozen=True)
class StagedInput:
    """An input copied for one run: its name in the run folder and the verified copy."""

    name: str
    kind: InputKind
    path: Path


def human_size(size: int) -> str:
    """``12.3 kB``, ``4.0 MB``: decimal units, as plans show sizes."""
    if size < 1000:
        return f"{size} B"
    scaled, unit = size / 1000, "kB"
    for bigger in ("MB", "GB"):
        if scaled < 1000:
            break
        scaled, unit = scaled / 1000, bigger
    return f"{scaled:.1f}".removesuffix(".0") + f" {unit}"


def input_paths(value: object) -> tuple[str, ...]:
    """The caller's ``inputs``: a list of non-empty path strings (a 400 otherwise)."""
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise InvalidRequest("inputs must be a list of paths", code=InputRefused.code)
    for path in value:
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            raise InvalidRequest(f"inputs: {path!r} is not a path", code=InputRefused.code)
    return tuple(value)


def absolute_paths(paths: Iterable[str] | None) -> tuple[str, ...]:
    """A face's ``--input`` paths, absolute from its current folder and not resolved (a
    symlink keeps its name and is checked as one): a server whose root folder holds
    them finds them as the core in this process does."""
    return tuple(os.path.abspath(path) for path in paths or ())


# -- plan time ------------------------------------------------------------------------


def resolve_inputs(
    root: Path,
    paths: Sequence[str],
    *,
    reserved: Iterable[str] = (),
    hidden: Iterable[Path] = (),
    caps: InputCaps,
) -> tuple[RunInput, ...]:
    """The inputs ``paths`` name under ``root``, checked, sized and hashed.

    ``reserved`` are the names the run folder holds already (the snippet's file):
    an input taking one, ``out`` or another input's name is refused. ``hidden`` are the
    credential folders and files every run is kept from (resolved): an input that is
    one, lies in one or holds one is refused. Raises :class:`InputRefused` (400)
    naming the path for one outside ``root``, missing, neither file nor folder, holding
    a symlink out of its tree or anything but files and folders, and
    :class:`InvalidRequest` for a name clash or a cap passed.
    """
    taken = set(RESERVED_NAMES) | set(reserved)
    root = _resolved(root, str(root))
    hidden = tuple(hidden)
    found: list[tuple[str, Path, str, InputKind]] = []
    for asked in input_paths(list(paths)):
        given = _shown(root, asked)
        path = _under_root(root, given)
        secret = next(
            (h for h in hidden if h == path or path in h.parents or h in path.parents), None
        )
        if secret is not None:
            raise InputRefused(
                f"input {given!r} is or holds {str(secret)!r}, a credential folder or file "
                "kept from every run; refused",
                code="input_hidden",
            )
        name = _run_name(given, path)
        if name in taken:
            raise InvalidRequest(
                f"input {given!r}: the name {name!r} is taken in the run folder (by the "
                "snippet's file, out/ or another input); rename it or give its folder",
                code="input_name_clash",
            )
        taken.add(name)
        found.append((given, path, name, "dir" if path.is_dir() else "file"))
    # The caps on what the sizes say, before a byte is read; a folder's walk stops at
    # the first file past them (a home folder given by mistake is not walked whole).
    total_bytes = total_files = 0
    listed: list[list[tuple[str, Path, int]]] = []
    for given, path, _, kind in found:
        entries = []
        for entry in _walk(path, given) if kind == "dir" else [("", path, path.stat().st_size)]:
            entries.append(entry)
            total_files, total_bytes = total_files + 1, total_bytes + entry[2]
            _check_caps(total_bytes, total_files, caps)
        listed.append(entries)
    out = []
    for (given, path, name, kind), entries in zip(found, listed, strict=True):
        hashed = [(rel, *_hash_file(file, given, size)) for rel, file, size in entries]
        sha, size = _combined(hashed, kind)
        out.append(RunInput(name, kind, size, sha, len(entries), path, given))
    return tuple(out)


def _shown(root: Path, given: str) -> str:
    """``given`` as messages and plans name it: relative to ``root`` when an absolute
    path inside it (a face's ``--input data.csv`` is sent absolute)."""
    if os.path.isabs(given):
        relative = os.path.relpath(os.path.normpath(given), root)
        if not relative.startswith(os.pardir):
            return given if relative == os.curdir else relative
    return given


def _resolved(path: Path, given: str) -> Path:
    try:
        return path.resolve(strict=True)
    except FileNotFoundError:
        raise InputRefused(f"input {given!r} does not exist") from None
    except RuntimeError:  # Python < 3.13 reports a symlink loop this way
        raise InputRefused(f"input {given!r} is a symlink loop") from None
    except OSError as exc:
        raise InputRefused(f"cannot resolve input {given!r}: {exc.strerror or exc}") from None


def _under_root(root: Path, given: str) -> Path:
    """The resolved path of ``given`` (relative to ``root`` or absolute inside it)."""
    raw = Path(given) if os.path.isabs(given) else root / given
    path = _resolved(raw, given)
    if path != root and root not in path.parents:
        if raw.is_symlink():
            raise InputRefused(
                f"input {given!r} is a symlink to {str(path)!r}, outside the root folder; refused",
                code="input_symlink",
            )
        raise InputRefused(f"input {given!r} is outside the root folder")
    info = path.stat()
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        raise InputRefused(f"input {given!r} is neither a regular file nor a folder")
    return path


def _run_name(given: str, path: Path) -> str:
    """The base name the caller gave (``data.csv``; ``.`` and ``..``: the folder's own)."""
    name = Path(given.rstrip("/")).name
    return name if name not in ("", ".", "..") else path.name


def _walk(top: Path, given: str) -> Iterator[tuple[str, Path, int]]:
    """``(relpath, file, size)`` of every regular file under ``top``.

    A symlink to a file inside ``top`` counts as that file; one that points outside
    ``top``, dangles or points to a folder is refused naming it, as is a FIFO, socket
    or device (nothing is opened while walking).
    """

    def refuse(rel: str, why: str, code: str = InputRefused.code) -> InputRefused:
        return InputRefused(
            f"input {given!r}: {os.path.join(given, rel)!r} {why}; refused", code=code
        )

    pending = [""]
    while pending:
        rel_dir = pending.pop()
        try:
            with os.scandir(top / rel_dir) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            raise refuse(rel_dir, f"cannot be listed: {exc.strerror or exc}") from None
        for entry in entries:
            rel = os.path.join(rel_dir, entry.name)
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                target = Path(os.path.realpath(top / rel))
                if target != top and top not in target.parents:
                    raise refuse(
                        rel, f"is a symlink to {str(target)!r}, outside {given!r}", "input_symlink"
                    )
                try:
                    info = target.stat()
                except OSError:
                    raise refuse(rel, "is a dangling symlink", "input_symlink") from None
                if not stat.S_ISREG(info.st_mode):
                    raise refuse(rel, "is a symlink to a folder (not followed)", "input_symlink")
                yield rel, target, info.st_size
            elif stat.S_ISDIR(info.st_mode):
                pending.append(rel)
            elif stat.S_ISREG(info.st_mode):
                yield rel, top / rel, info.st_size
            else:
                raise refuse(rel, "is not a regular file (a FIFO, socket or device)")


def _check_caps(total_bytes: int, total_files: int, caps: InputCaps) -> None:
    if total_files > caps.max_files:
        raise InvalidRequest(
            f"inputs hold more than {caps.max_files} files (the administrator's max_input_files)",
            code="inputs_too_many_files",
        )
    if total_bytes > caps.max_bytes:
        raise InvalidRequest(
            f"inputs hold more than {human_size(caps.max_bytes)} (the administrator's "
            "max_input_bytes)",
            code="inputs_too_large",
        )


def _combined(hashed: Sequence[tuple[str, int, str]], kind: InputKind) -> tuple[str, int]:
    """``(sha256:…, size)`` of an input from its files' ``(relpath, size, hex)``."""
    size = sum(n for _, n, _ in hashed)
    if kind == "file":
        return "sha256:" + hashed[0][2], size
    lines = "".join(f"{rel}\0{n}\0{hex_}\n" for rel, n, hex_ in sorted(hashed))
    return "sha256:" + hashlib.sha256(lines.encode("utf-8", "surrogateescape")).hexdigest(), size


def _hash_file(path: Path, given: str, size: int, copy_to: int | None = None) -> tuple[int, str]:
    """``(bytes, hex sha256)`` of the file at ``path``, read at most ``size`` + 1 bytes
    (a file that grew stops there), copied to the open ``copy_to`` when given."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError as exc:
        raise InputRefused(f"cannot read input {given!r}: {exc.strerror or exc}") from None
    digest = hashlib.sha256()
    read = 0
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputRefused(f"input {given!r}: {str(path)!r} is not a regular file")
        while read <= size:
            chunk = os.read(fd, min(_CHUNK, size + 1 - read))
            if not chunk:
                break
            read += len(chunk)
            digest.update(chunk)
            if copy_to is not None:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(copy_to, view) :]
    finally:
        os.close(fd)
    return read, digest.hexdigest()


# -- run time -------------------------------------------------------------------------


def stage_inputs(inputs: Sequence[RunInput], private: Path) -> tuple[StagedInput, ...]:
    """Copy ``inputs`` into ``private/in`` (``private``: the server's 0700 folder),
    checking each against what was approved as it is copied.

    The copies are read-only (files 0444, folders 0755: a run that drops to a uid of
    its own reads them through ``in``, which no one else can reach): an engine binds
    or moves them into the run folder. A file that changed since the plan (size,
    content, the files of a folder) raises :class:`ApprovalError` ``approval_mismatch``;
    so does one gone or grown. The caller removes ``private`` whatever happens.
    """
    folder = private / STAGED_DIR
    try:
        _folder(folder)
        return tuple(_stage_one(one, folder / one.name) for one in inputs)
    except OSError as exc:  # the server's own folder: full, or gone
        raise InputRefused(f"cannot stage the inputs: {exc.strerror or exc}") from None


def _stage_one(one: RunInput, target: Path) -> StagedInput:
    if one.path is None:
        raise InputRefused(f"input {one.name!r} has no file on this machine to hand to the run")
    if one.kind == "dir":
        try:
            entries = list(_walk(one.path, one.given))
        except InputRefused as exc:
            raise _changed(one, exc.message) from None
        if len(entries) != one.files or sum(n for _, _, n in entries) != one.size:
            raise _changed(one, "its files or their sizes differ")
        _folder(target)
        hashed = []
        for rel, file, size in entries:
            for parent in reversed(Path(rel).parents[:-1]):
                if not (target / parent).is_dir():
                    _folder(target / parent)
            hashed.append((rel, *_copy_file(one, file, size, target / rel)))
    else:
        hashed = [("", *_copy_file(one, one.path, one.size, target))]
    sha, size = _combined(hashed, one.kind)
    if (sha, size) != (one.sha256, one.size):
        raise _changed(one, "its content differs")
    return StagedInput(one.name, one.kind, target)


def _folder(path: Path) -> None:
    """A folder of the copies: 0755 whatever the umask (a run's own uid enters it)."""
    path.mkdir()
    path.chmod(0o755)


def _copy_file(one: RunInput, source: Path, size: int, target: Path) -> tuple[int, str]:
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444)
    try:
        os.fchmod(fd, 0o444)  # (not through the umask)
        return _hash_file(source, one.given, size, copy_to=fd)
    except InputRefused as exc:
        raise _changed(one, exc.message) from None
    finally:
        os.close(fd)


def _changed(one: RunInput, why: str) -> ApprovalError:
    return ApprovalError(
        f"input {one.given or one.name!r} changed after the plan was approved ({why}); "
        "plan and approve it again",
        code="approval_mismatch",
    )
