"""What a caller asks to run and who asks: :class:`RunOptions` and :class:`Caller`.

One frozen record of the run's options crosses every layer (the faces, ``client/``,
the service, the planner), so a new option is one field here, not an edit of every
signature on the way. The REST bodies carry the same names
(:meth:`RunOptions.from_body`, :meth:`RunOptions.to_body`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["NO_OPTIONS", "Caller", "RunOptions"]


@dataclass(frozen=True)
class RunOptions:
    """What to run and how, as the caller asked it (unresolved: ``None`` is the default).

    ``code`` or ``file`` (a path under the server's root); ``filename``, with
    ``code``: the file the caller read that code from itself (``jupyter sandbox run
    FILE``), so the run is named after it as a file run is, and nothing else of the file
    is sent (in-process callers only: the REST schemas do not take it); ``env`` names
    server variables to pass through; ``session`` names the sandbox session the code
    runs in (its kernel keeps state between cells; not the browser's
    ``Caller.session_id``); ``source`` says which face made the request.
    """

    language: str | None = None
    code: str | None = None
    file: str | None = None
    filename: str | None = None
    stdin: str | None = None
    timeout_sec: int | None = None
    backend: str | None = None
    allow_network: bool | None = None
    env: Sequence[str] = ()
    session: str | None = None
    source: str = "api"

    def __post_init__(self) -> None:
        # A list from JSON or argparse is kept as a tuple: the record stays hashable and frozen.
        if not isinstance(self.env, tuple):
            object.__setattr__(self, "env", tuple(self.env or ()))

    def but(self, **changes: Any) -> RunOptions:
        """A copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> RunOptions:
        """The options a request body carries (other keys are the caller's, not the run's)."""
        return cls(**{name: body[name] for name in _FIELDS if body.get(name) is not None})

    def to_body(self) -> dict[str, Any]:
        """The fields given, as a REST body carries them (defaults left out)."""
        body: dict[str, Any] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None and value != ():
                body[name] = list(value) if name == "env" else value
        return body


_FIELDS = tuple(f.name for f in dataclasses.fields(RunOptions))


@dataclass(frozen=True)
class Caller:
    """Who asks: the identity (``None`` under a shared-token login) and the session."""

    user: str | None = None
    session_id: str | None = None

    @classmethod
    def from_body(cls, body: Mapping[str, Any], user: str | None) -> Caller:
        """The caller of a request: the server's user, the body's session."""
        session = body.get("session_id")
        return cls(user=user, session_id=str(session) if session is not None else None)


#: The options of a caller that gives none (each default applies).
NO_OPTIONS = RunOptions()
