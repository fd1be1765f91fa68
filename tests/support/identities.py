"""Identity providers with real users, for servers started in their own process.

``--ServerApp.identity_provider_class=tests.support.identities.HeaderUsers``: a request
naming ``X-Test-User`` is that user (as a hub would provide); one with the server's
token alone is the server's own check (readiness polls, the suite's sweeps).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User

#: A well-formed tornado XSRF token; a user's writes carry it as cookie and header.
XSRF = "2|deadbeef|cafe0123|1700000000"


def user_headers(name: str) -> dict[str, str]:
    """What a request of user ``name`` carries under :class:`HeaderUsers`."""
    return {"X-Test-User": name, "Cookie": f"_xsrf={XSRF}", "X-XSRFToken": XSRF}


class HeaderUsers(IdentityProvider):
    """Real, stable users named by an ``X-Test-User`` header; else the token's user."""

    def get_user(self, handler: Any) -> User | Awaitable[User | None] | None:
        name = handler.request.headers.get("X-Test-User")
        if name:
            return User(username=name)
        return super().get_user(handler)
