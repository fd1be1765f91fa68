"""The base handler: the one place core errors become HTTP answers.

Every error leaves as ``tornado.web.HTTPError`` and is written as JSON
``{"message", "reason", "code"}``; never a traceback, never an HTML page.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Awaitable, Callable
from http.client import responses
from pathlib import PurePath
from typing import Any, TypeVar, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import (
    IdentityProvider,
    LegacyIdentityProvider,
    PasswordIdentityProvider,
)
from jupyter_server.base.handlers import APIHandler
from tornado import web
from tornado.http1connection import HTTP1Connection

from ..sandbox.errors import FileAccessError, InputRefused, InvalidRequest, SandboxError
from ..sandbox.request import Caller
from ..sandbox.rich import json_with_outputs
from ..sandbox.service import SandboxService
from .schemas import MAX_BODY_BYTES, parse_body

#: The most of a body read from a client that is not authenticated (then a 403).
UNAUTHENTICATED_BODY_BYTES = 64 * 1024
#: An oversized body up to this size is read and dropped before its 400, so a client
#: that sends it all before reading gets the answer; a larger one is refused unread.
DRAINED_BODY_BYTES = 4 * MAX_BODY_BYTES

#: Where the app keeps its service in the web app's settings (other extensions may use it).
SERVICE_KEY = "gitpilot_sandbox_service"

#: The ``code`` of an error that did not come from the sandbox core.
_STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    500: "internal_error",
}

#: jupyter_server's own providers know one shared secret (token or password), not people.
_SHARED_SECRET_PROVIDERS = (IdentityProvider, PasswordIdentityProvider, LegacyIdentityProvider)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Awaitable[None]])


def authorized_execute(method: F) -> F:
    """``@authorized`` asking for ``execute``: plan, approve, run and lifecycle lead to code runs.

    (A plain ``@authorized`` maps POST to ``write``.)
    """
    return cast(F, authorized(action="execute")(method))


class SandboxHTTPError(web.HTTPError):
    """An ``HTTPError`` that carries the stable error ``code`` of the JSON body."""

    def __init__(
        self, status_code: int, message: str, error_code: str, retry_after: int | None = None
    ) -> None:
        # The message goes in as an argument: a literal '%' in it must never be
        # taken for a format directive when tornado logs the error.
        super().__init__(status_code, "%s", message)
        self.message = message
        self.error_code = error_code
        #: Seconds before trying again (a ``Retry-After`` header), for a ``busy`` refusal.
        self.retry_after = retry_after


def http_error(exc: SandboxError) -> SandboxHTTPError:
    """Translate a core error into its HTTP status, message and code."""
    return SandboxHTTPError(
        exc.status, exc.message, exc.code, retry_after=getattr(exc, "retry_after", None)
    )


def error_body(status_code: int, exc: BaseException | None) -> dict[str, str]:
    """The JSON body for an error answer; internal failures never show their details."""
    reason = responses.get(status_code, "Unknown HTTP Error")
    if isinstance(exc, SandboxHTTPError):
        return {"message": exc.message, "reason": reason, "code": exc.error_code}
    code = _STATUS_CODES.get(status_code, "http_error" if status_code < 500 else "internal_error")
    if isinstance(exc, web.HTTPError) and exc.log_message:
        try:
            message = exc.log_message % exc.args
        except (TypeError, ValueError):
            message = exc.log_message
    elif status_code >= 500:
        message = "internal error; the server log has the details"
    else:
        message = reason
    return {"message": message, "reason": reason, "code": code}


def _raise_deferred_first(method: F) -> F:
    """Wrap a handler method so a refusal found before the body came is answered first.

    The wrapper is itself ``@web.authenticated`` (the method inside is too): jupyter_server
    checks at start that every extension endpoint is, and warns about each one it cannot
    see it on.
    """

    @functools.wraps(method)
    async def wrapper(self: SandboxHandler, *args: Any, **kwargs: Any) -> None:
        if self._deferred is not None:
            raise self._deferred
        await method(self, *args, **kwargs)

    return cast(F, web.authenticated(wrapper))


def body_too_large() -> SandboxHTTPError:
    """The answer to a body over :data:`MAX_BODY_BYTES`, given before it is read."""
    return http_error(
        InvalidRequest(
            f"the request body is larger than {MAX_BODY_BYTES} bytes", code="body_too_large"
        )
    )


@web.stream_request_body
class SandboxHandler(APIHandler):
    """Base of every sandbox route: resource ``sandbox``, the service, the user, the body.

    The body is streamed, never buffered whole by the server (jupyter_server alone
    would buffer up to 512 MiB before any check). Before a byte of it is read,
    ``prepare`` answers a 403 to an unauthenticated request with a body over
    :data:`UNAUTHENTICATED_BODY_BYTES` (or of unknown length), and a 400
    ``body_too_large`` to a ``Content-Length`` over :data:`DRAINED_BODY_BYTES`; both
    close the connection. A body over :data:`MAX_BODY_BYTES` but within the drain
    limit (or a chunked one past the limit) is read and dropped, never kept, so a
    client that sends it all before reading still gets its 400.
    """

    auth_resource = "sandbox"
    _body_chunks: bytearray | None = None
    #: A refusal found before the body came, answered once it has been read and dropped.
    _deferred: web.HTTPError | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("get", "put", "post", "delete", "patch"):
            method = cls.__dict__.get(name)
            if method is not None:
                setattr(cls, name, _raise_deferred_first(method))

    async def prepare(self) -> None:  # type: ignore[override]
        """Authentication first, then the body's announced size; then the body may come."""
        raw_length = self.request.headers.get("Content-Length", "").strip()
        length = int(raw_length) if raw_length.isdigit() else None
        chunked = "chunked" in self.request.headers.get("Transfer-Encoding", "").lower()
        try:
            await super().prepare()
        except web.HTTPError as exc:
            # jupyter_server's own refusals (a missing XSRF token): a small body is read
            # first, so the client gets the answer instead of a reset connection.
            if chunked or (length or 0) > UNAUTHENTICATED_BODY_BYTES:
                raise
            self._deferred = exc
        self._body_chunks = bytearray()
        limit = MAX_BODY_BYTES
        if self.current_user is None:
            # Unauthenticated: only a small body is read (and dropped) before the 403 of
            # the method's @web.authenticated; anything more is refused unread.
            if chunked or (length or 0) > UNAUTHENTICATED_BODY_BYTES:
                raise web.HTTPError(403)
            limit = UNAUTHENTICATED_BODY_BYTES
        elif length is not None and length > MAX_BODY_BYTES:
            if length > DRAINED_BODY_BYTES:
                raise body_too_large()
            self._refuse_body()
            limit = length
        connection = self.request.connection
        if isinstance(connection, HTTP1Connection):
            # A body without a length (chunked) is dropped past the limit; past the
            # drain limit the connection itself cuts it off.
            connection.set_max_body_size(max(limit, DRAINED_BODY_BYTES))

    def _refuse_body(self) -> None:
        """Drop the body from here on and answer ``body_too_large`` once it has come."""
        self._body_chunks = None
        if self._deferred is None:
            self._deferred = body_too_large()

    def data_received(self, chunk: bytes) -> None:
        """Keep the body's bytes up to the limit; past it, drop them (the 400 comes after)."""
        if self._body_chunks is None:
            return
        if len(self._body_chunks) + len(chunk) > MAX_BODY_BYTES:
            self._refuse_body()
            return
        self._body_chunks += chunk

    @property
    def service(self) -> SandboxService:
        """The one service of the server."""
        service: SandboxService = self.settings[SERVICE_KEY]
        return service

    @property
    def username(self) -> str | None:
        """The Jupyter identity's username, passed to the service as ``user``.

        None under jupyter_server's own identity providers: they mint a random
        "Anonymous ..." user for every token request without a cookie, a name that
        neither identifies a person nor stays the same from plan to run (every holder
        of the token is one principal). Providers with real users (JupyterHub, custom
        ones) give names that audit events record and approvals are bound to.
        """
        if type(self.identity_provider) in _SHARED_SECRET_PROVIDERS:
            return None
        user = self.current_user
        name = getattr(user, "username", None)
        return name if isinstance(name, str) else None

    def caller(self, session_id: str | None = None) -> Caller:
        """Who calls: :attr:`username` and the session the request names."""
        return Caller(user=self.username, session_id=session_id)

    def body(self, schema_name: str) -> dict[str, Any]:
        """The request body, parsed and checked against ``schema_name`` of rest-api.yml;
        its ``inputs`` (and its batch items') may not name hidden files
        (:meth:`check_not_hidden`)."""
        if self._body_chunks is None:
            raise body_too_large()
        try:
            body = parse_body(bytes(self._body_chunks), schema_name)
        except SandboxError as exc:
            raise http_error(exc) from None
        items = body.get("items")
        holders = (
            [body, *(it for it in items if isinstance(it, dict))]
            if isinstance(items, list)
            else [body]
        )
        for holder in holders:
            for path in holder.get("inputs") or ():
                self.check_not_hidden(path, what="input")
        return body

    def check_not_hidden(self, file: str | None, *, what: str = "file") -> None:
        """Refuse hidden files (``.env``, ``.ssh/...``) as the server's file browser does.

        ``ContentsManager.allow_hidden = True`` lifts this, as it does for the contents API.
        """
        if file is None or getattr(self.contents_manager, "allow_hidden", False):
            return
        parts = PurePath(file).parts
        root = getattr(self.contents_manager, "root_dir", None)
        if PurePath(file).is_absolute() and root:
            # What lies above the root is the server's, not the path's (a face sends an
            # absolute path: --input data.csv from a folder under the root).
            relative = os.path.relpath(os.path.normpath(file), root)
            parts = PurePath(relative).parts if not relative.startswith(os.pardir) else parts
        if any(part.startswith(".") and part not in (".", "..") for part in parts):
            error = InputRefused if what == "input" else FileAccessError
            raise http_error(
                error(f"{what} {file!r} is hidden; the server does not serve hidden files")
            )

    async def call(self, awaitable: Awaitable[T]) -> T:
        """Await a service call; its typed errors become HTTP errors here and only here."""
        try:
            return await awaitable
        except SandboxError as exc:
            raise http_error(exc) from None

    def write_json(self, data: Any) -> None:
        """Finish with ``data`` as JSON (a run's images' base64 not escaped again)."""
        self.finish(json_with_outputs(data) if isinstance(data, dict) else json.dumps(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Always the JSON error body, whatever failed."""
        exc_info = kwargs.get("exc_info")
        exc = exc_info[1] if exc_info else None
        body = error_body(status_code, exc)
        if isinstance(exc, SandboxHTTPError) and exc.retry_after is not None:
            self.set_header("Retry-After", str(exc.retry_after))
        self.log.warning("sandbox API %s: %s", body["code"], body["message"])
        self.finish(json.dumps(body))
