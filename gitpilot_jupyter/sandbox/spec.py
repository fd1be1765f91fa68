"""What a run is, defined once: :class:`RunSpec` and its digest.

A plan describes a :class:`RunSpec`; approving the plan binds a token to the
spec's digest; running the approved plan runs that very spec. The spec is built
by one function (:meth:`~.service.planner.Planner.spec`) for planning and for the
long form of a run, so the two can never derive a run differently (a timeout
clamped in one place and not in the other was such a bug).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .backend import ResourceLimits


def plan_digest(
    *,
    language: str,
    code: str,
    stdin: str | None,
    timeout_sec: int,
    network: bool,
    backend: str,
    env: Sequence[str] = (),
    session: str | None = None,
) -> str:
    """The sha256 over everything that decides what a run does.

    ``env`` (the variable names passed through) and ``session`` (the session a cell
    runs in) are bound only when given, so a plan without them keeps the digest it
    always had.
    """
    fields: dict[str, Any] = {
        "language": language,
        "code": code,
        "stdin": stdin,
        "timeout_sec": timeout_sec,
        "network": network,
        "backend": backend,
    }
    if env:
        fields["env"] = sorted(env)
    if session is not None:
        fields["session"] = session
    material = json.dumps(fields, sort_keys=True, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(material.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RunSpec:
    """One run, fully resolved: canonical language, code, stdin, clamped timeout, network,
    backend, the server variables passed through, the resource limits in force when it
    was planned, for a file run the file (or, for code its caller read from a file,
    that file's name: ``filename``) and, for a cell of a session, the session's name
    (:mod:`~gitpilot_jupyter.sandbox.sessions`: the code runs in that session's kernel).

    The digest covers what the contract binds an approval to (the limits are the
    administrator's, not the requester's, and the file's text is the code: both are
    carried along unhashed).
    """

    language: str
    code: str
    stdin: str | None
    timeout_sec: int
    network: bool
    backend: str
    env: tuple[str, ...] = ()
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    file: str | None = None
    filename: str | None = None
    session: str | None = None

    @property
    def named_after(self) -> str | None:
        """The file the run is named after (plans, results, tracebacks), if any."""
        return self.file or self.filename

    @functools.cached_property
    def digest(self) -> str:
        """``sha256:`` + hex over language, code, stdin, timeout, network, backend and
        the session (worked out once: the spec is frozen)."""
        return plan_digest(
            language=self.language,
            code=self.code,
            stdin=self.stdin,
            timeout_sec=self.timeout_sec,
            network=self.network,
            backend=self.backend,
            env=self.env,
            session=self.session,
        )
