"""Languages: aliases, canonical names, interpreters and snippet file names."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import PurePath

from .errors import UnknownLanguage
from .executables import which

CANONICAL_LANGUAGES = ("python", "javascript", "bash")

_ALIASES = {
    "python": "python",
    "py": "python",
    "python3": "python",
    "javascript": "javascript",
    "js": "javascript",
    "node": "javascript",
    "nodejs": "javascript",
    "bash": "bash",
    "sh": "bash",
    "shell": "bash",
}

_EXTENSIONS = {"python": ".py", "javascript": ".js", "bash": ".sh"}
_BY_EXTENSION = {ext: lang for lang, ext in _EXTENSIONS.items()}


def canonical_language(name: object) -> str:
    """Map a language name or alias (case-insensitive, trimmed) to its canonical name.

    Raises :class:`UnknownLanguage` for anything else.
    """
    key = str(name).strip().lower() if isinstance(name, str) else ""
    try:
        return _ALIASES[key]
    except KeyError:
        raise UnknownLanguage(
            f"unknown language {name!r}; expected one of {list(CANONICAL_LANGUAGES)} "
            f"or an alias ({', '.join(sorted(set(_ALIASES) - set(CANONICAL_LANGUAGES)))})"
        ) from None


def language_for_path(path: str) -> str:
    """The canonical language of a file, from its extension (``.py``, ``.js``, ``.sh``)."""
    for ext, lang in _BY_EXTENSION.items():
        if path.lower().endswith(ext):
            return lang
    raise UnknownLanguage(
        f"cannot tell the language of {path!r}; supported extensions: {sorted(_BY_EXTENSION)}"
    )


def snippet_filename(language: str) -> str:
    """The file name a snippet is written to inside its temp dir."""
    return "inline" + _EXTENSIONS[canonical_language(language)]


#: A file run keeps its own name in the run folder when the name is this plain: never an
#: option (``-c``), never hidden, no spaces. Plans and tracebacks then name the user's file.
PLAIN_FILENAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def plain_filename(file: str | PurePath | None) -> str | None:
    """The name of ``file`` when it is plain enough to run under (:data:`PLAIN_FILENAME`)."""
    name = PurePath(file).name if file is not None else ""
    return name if PLAIN_FILENAME.fullmatch(name) else None


def run_filename(language: str, file: str | PurePath | None = None) -> str:
    """The name the snippet runs under: a file run's own (``hello_sandbox.py``), else
    :func:`snippet_filename`.
    """
    return plain_filename(file) or snippet_filename(language)


@dataclass(frozen=True)
class Interpreters:
    """Interpreter executables, resolved once to real paths (never through shims)."""

    python: str = sys.executable
    javascript: str = "node"
    bash: str = "bash"

    def display_command(self, language: str, file: str | PurePath | None = None) -> list[str]:
        """The command as shown in plans and results, e.g. ``["python", "inline.py"]``
        (``file``: a file run's file, shown by its own name, see :func:`run_filename`).
        """
        lang = canonical_language(language)
        names = {"python": "python", "javascript": "node", "bash": "bash"}
        return [names[lang], run_filename(lang, file)]

    def resolve(self, language: str) -> str | None:
        """The absolute path of the interpreter for ``language``, or None if not installed."""
        lang = canonical_language(language)
        exe: str = getattr(self, lang)
        return which(exe)
