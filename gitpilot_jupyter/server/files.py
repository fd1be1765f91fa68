"""``GET /api/sandbox/runs/{run_id}/files/{name}``: a file a run handed back from ``out/``.

Only the run's owner gets it (the rule plans follow); anyone else, an unknown run or
name, and an expired run get the same 404. The bytes go out as a download: the type
their name suggests, ``Content-Disposition: attachment`` and
``X-Content-Type-Options: nosniff``, so a browser never renders what a snippet wrote
(HTML, SVG) in the server's origin.
"""

from __future__ import annotations

import asyncio
import mimetypes
from urllib.parse import quote

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..sandbox.errors import SandboxError
from .base import SandboxHandler, http_error

#: The type of a name whose type is not known.
DEFAULT_TYPE = "application/octet-stream"


def content_type(name: str) -> str:
    """The type the name of a handed-back file suggests (text types say UTF-8)."""
    guessed, encoding = mimetypes.guess_type(name, strict=False)
    if guessed is None or encoding is not None:  # data.csv.gz: the bytes are gzip
        return DEFAULT_TYPE
    return f"{guessed}; charset=utf-8" if guessed.startswith("text/") else guessed


def attachment(name: str) -> str:
    """``Content-Disposition`` for ``name``: its last part, ASCII-safe and RFC 5987."""
    base = name.rsplit("/", 1)[-1]
    ascii_name = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\;' else "_" for c in base
    )
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(base, safe='')}"


class RunFileHandler(SandboxHandler):
    """``GET /api/sandbox/runs/{run_id}/files/{name}``."""

    @web.authenticated
    @authorized
    async def get(self, run_id: str, name: str) -> None:
        """The bytes of ``name`` (relative to ``out/``) of the caller's run ``run_id``."""
        try:
            data = await asyncio.to_thread(self.service.run_file, run_id, name, self.caller())
        except SandboxError as exc:
            raise http_error(exc) from None
        self.set_header("Content-Disposition", attachment(name))
        self.set_header("X-Content-Type-Options", "nosniff")
        self.set_header("Cache-Control", "private, no-store")
        # (APIHandler.finish sets application/json unless told the type.)
        self.finish(data, set_content_type=content_type(name))
