"""Script files a run is given (the prestart hook, the display shim): their names set.

Each such file is a real file of the package, checked by ruff and mypy, whose lines
``NAME = ...`` at its top stand for values only known here (fds, file names, the wire's
constants): :func:`with_names` replaces them.
"""

from __future__ import annotations

from collections.abc import Mapping


def with_names(source: str, given: Mapping[str, str]) -> str:
    """``source`` with each line ``NAME = ...`` of a name in ``given`` set to its value
    (each name must have such a line)."""
    missing = dict(given)
    lines = source.splitlines(keepends=True)
    for number, line in enumerate(lines):
        name, sep, _ = line.partition(" = ")
        if sep and name in missing:
            lines[number] = f"{name} = {missing.pop(name)}\n"
    assert not missing, f"the script sets no {sorted(missing)}"
    return "".join(lines)
