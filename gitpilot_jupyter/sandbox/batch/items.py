"""The snippets of a batch, from a JSONL file, a folder of files or a Python list.

Each item is ``{id, language, code | file, stdin?, timeout_sec?, inputs?}``. Files
named by a JSONL line are read relative to the JSONL file's folder (nothing outside
it), and its ``inputs`` are found there too (then checked as every run's are); a
folder gives one item per file, run by its extension's language, or through one
bash command template (``--each 'python3 {file}'``) that gets the file written into
the snippet's own temp dir.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FileAccessError, InvalidRequest
from ..files import read_under_root
from ..inputs import input_paths
from ..languages import language_for_path

ITEM_FIELDS = ("id", "language", "code", "file", "stdin", "timeout_sec", "inputs")
#: The most snippets one batch may hold (the plan lives in memory while it runs).
MAX_ITEMS = 100_000
#: The placeholder ``--each`` replaces with the (shell-quoted) file name.
FILE_PLACEHOLDER = "{file}"


@dataclass(frozen=True)
class BatchItem:
    """One snippet of a batch, as given (the plan canonicalises and checks it)."""

    id: str
    language: str | None = None
    code: str | None = None
    file: str | None = None
    stdin: str | None = None
    timeout_sec: int | None = None
    #: Files and folders the item's run finds as ``./NAME`` (see :mod:`..inputs`).
    inputs: tuple[str, ...] = ()
    #: With ``--each``: the file's own text, scanned in its own language beside the command.
    content: str | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The item as a JSON object (the shape the JSONL file and the REST API take)."""
        found = {k: getattr(self, k) for k in ITEM_FIELDS if getattr(self, k) not in (None, ())}
        if "inputs" in found:
            found["inputs"] = list(found["inputs"])
        return found


def item_from_mapping(data: object, where: str) -> BatchItem:
    """Check one item's shape; ``where`` names it in the error (``line 3``, ``item 2``)."""
    if not isinstance(data, Mapping):
        raise InvalidRequest(f"{where}: an item must be a JSON object, not {type(data).__name__}")
    unknown = sorted(set(data) - set(ITEM_FIELDS))
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {unknown}; expected some of {ITEM_FIELDS}")
    raw_id = data.get("id")
    if isinstance(raw_id, bool) or not isinstance(raw_id, (str, int)) or not str(raw_id).strip():
        raise InvalidRequest(f"{where}: every item needs an id (a non-empty string or integer)")
    for key in ("language", "code", "file", "stdin"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise InvalidRequest(f"{where}: {key} must be a string")
    timeout = data.get("timeout_sec")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
        raise InvalidRequest(f"{where}: timeout_sec must be an integer")
    if (data.get("code") is None) == (data.get("file") is None):
        raise InvalidRequest(f"{where} ({raw_id}): give exactly one of code or file")
    try:
        inputs = input_paths(data.get("inputs"))
    except InvalidRequest as exc:
        raise InvalidRequest(f"{where}: {exc.message}", code=exc.code) from None
    return BatchItem(
        id=str(raw_id),
        language=data.get("language"),
        code=data.get("code"),
        file=data.get("file"),
        stdin=data.get("stdin"),
        timeout_sec=timeout,
        inputs=inputs,
    )


def items_from_list(items: Iterable[object]) -> list[BatchItem]:
    """Items from Python objects: dicts of the item fields, or :class:`BatchItem`."""
    found = [
        it if isinstance(it, BatchItem) else item_from_mapping(it, f"item {n}")
        for n, it in enumerate(items, 1)
    ]
    return _checked(found)


def read_files(items: list[BatchItem], root: Path) -> list[BatchItem]:
    """Replace each ``file`` by its content, read under ``root`` (the file stays as a label)."""
    out = []
    for it in items:
        if it.inputs:  # found beside the file that names them, as its `file` is
            it = dataclasses.replace(it, inputs=tuple(str(root / p) for p in it.inputs))
        if it.file is None:
            out.append(it)
            continue
        try:
            code = read_under_root(root, it.file)
        except FileAccessError as exc:
            where = exc.message.replace("the server's root folder", str(root))
            raise FileAccessError(f"item {it.id!r}: {where}") from None
        language = it.language or language_for_path(it.file)
        out.append(dataclasses.replace(it, language=language, code=code))
    return out


def load_jsonl(path: str | Path) -> list[BatchItem]:
    """Items from a JSONL file, one object a line (blank lines are skipped)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror or exc}") from None
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as exc:
            raise InvalidRequest(f"{path}, line {number}: not valid JSON: {exc}") from None
        items.append(item_from_mapping(data, f"{path}, line {number}"))
    return read_files(_checked(items), path.resolve().parent)


def each_command(template: str, name: str, content: str) -> str:
    """The bash snippet of ``--each``: write the file into the temp dir, then run the command."""
    quoted = shlex.quote(name)
    command = template.replace(FILE_PLACEHOLDER, quoted)
    return f"printf '%s' {shlex.quote(content)} > {quoted}\n{command}\n"


def load_folder(folder: str | Path, each: str | None = None) -> list[BatchItem]:
    """One item per file under ``folder`` (hidden ones skipped), id = its relative path.

    Without ``each`` a file runs in its extension's language; with it, every file
    runs through the bash command template ``each`` (``{file}`` = its name).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InvalidRequest(f"{folder} is not a folder")
    if each is not None and not each.strip():
        raise InvalidRequest("--each needs a command, e.g. --each 'python3 {file}'")
    items = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if not path.is_file() or any(part.startswith(".") for part in rel.parts):
            continue
        content = read_under_root(folder, str(rel))
        if each is None:
            items.append(BatchItem(rel.as_posix(), language_for_path(path.name), content, str(rel)))
        else:
            code = each_command(each, path.name, content)
            items.append(BatchItem(rel.as_posix(), "bash", code, str(rel), content=content))
    if not items:
        raise InvalidRequest(f"{folder} holds no files to run")
    return _checked(items)


def load_source(source: str | Path, each: str | None = None) -> list[BatchItem]:
    """Items from a JSONL file or a folder (``each`` only applies to a folder)."""
    path = Path(source)
    if path.is_dir():
        return load_folder(path, each)
    if each is not None:
        raise InvalidRequest("--each applies to a folder of files, not to a JSONL file")
    return load_jsonl(path)


def _checked(items: list[BatchItem]) -> list[BatchItem]:
    if not items:
        raise InvalidRequest("the batch has no items")
    if len(items) > MAX_ITEMS:
        raise InvalidRequest(f"a batch holds at most {MAX_ITEMS} items, got {len(items)}")
    seen: set[str] = set()
    for it in items:
        if it.id in seen:
            raise InvalidRequest(f"item id {it.id!r} appears twice; ids must be unique")
        seen.add(it.id)
    return items
