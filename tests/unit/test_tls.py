"""The shared TLS context: made once, verification on, used by per-call clients."""

from __future__ import annotations

import ssl

from gitpilot_jupyter.client.server import new_http_client
from gitpilot_jupyter.sandbox.matrixlab.backend import MatrixLabSandbox
from gitpilot_jupyter.tls import tls_context


def test_one_context_that_verifies() -> None:
    ctx = tls_context()
    assert ctx is tls_context()
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.check_hostname


async def test_per_call_clients_share_it() -> None:
    for client in (
        new_http_client(),
        MatrixLabSandbox(url="https://example.invalid")._client(),
    ):
        async with client:
            pool = client._transport._pool  # type: ignore[attr-defined]
            assert pool._ssl_context is tls_context()
