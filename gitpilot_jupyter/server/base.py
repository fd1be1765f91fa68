"""The base handler: the one place core errors become HTTP answers.

Every error leaves as ``tornado.web.HTTPError`` and is written as JSON
``{"message", "reason", "code"}``; never a traceback, never an HTML page.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from http.client import responses
from typing import Any, TypeVar, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import (
    IdentityProvider,
    LegacyIdentityProvider,
    PasswordIdentityProvider,
)
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..sandbox.errors import SandboxError
from ..sandbox.service import SandboxService
from .schemas import parse_body

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

    def __init__(self, status_code: int, message: str, error_code: str) -> None:
        # The message goes in as an argument: a literal '%' in it must never be
        # taken for a format directive when tornado logs the error.
        super().__init__(status_code, "%s", message)
        self.message = message
        self.error_code = error_code


def http_error(exc: SandboxError) -> SandboxHTTPError:
    """Translate a core error into its HTTP status, message and code."""
    return SandboxHTTPError(exc.status, exc.message, exc.code)


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


class SandboxHandler(APIHandler):
    """Base of every sandbox route: resource ``sandbox``, the service, the user, the body."""

    auth_resource = "sandbox"

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

    def body(self, schema_name: str) -> dict[str, Any]:
        """The request body, parsed and checked against ``schema_name`` of rest-api.yml."""
        try:
            return parse_body(self.request.body or b"", schema_name)
        except SandboxError as exc:
            raise http_error(exc) from None

    async def call(self, awaitable: Awaitable[T]) -> T:
        """Await a service call; its typed errors become HTTP errors here and only here."""
        try:
            return await awaitable
        except SandboxError as exc:
            raise http_error(exc) from None

    def write_json(self, data: Any) -> None:
        """Finish with ``data`` as JSON."""
        self.finish(json.dumps(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Always the JSON error body, whatever failed."""
        exc_info = kwargs.get("exc_info")
        exc = exc_info[1] if exc_info else None
        body = error_body(status_code, exc)
        self.log.warning("sandbox API %s: %s", body["code"], body["message"])
        self.finish(json.dumps(body))
