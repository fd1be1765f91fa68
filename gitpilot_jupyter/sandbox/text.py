"""Text a request may carry: valid Unicode only.

JSON can spell a lone surrogate (``"\\ud800"``), which is no character: it cannot be
encoded, hashed into a digest, written to a file or sent to a Runner. Such text is
refused at the door with a 400 ``invalid_unicode`` instead of failing later as a 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .errors import InvalidRequest


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text``, or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def check_text(name: str, text: str) -> str:
    """``text`` if it is valid Unicode, else :class:`InvalidRequest` ``invalid_unicode``."""
    where = lone_surrogate(text)
    if where is not None:
        raise InvalidRequest(
            f"{name} holds a lone surrogate (U+{ord(text[where]):04X} at index {where}), "
            "which is not a character; send UTF-8 text",
            code="invalid_unicode",
        )
    return text


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(str(key), f"{path}.<key>" if path else "<key>")
            yield from _strings(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")


def check_all_text(value: Any) -> None:
    """Check every string (keys too) of a decoded JSON value with :func:`check_text`."""
    for path, text in _strings(value, ""):
        check_text(path or "the body", text)
