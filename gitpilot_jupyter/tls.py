"""One TLS context for every HTTP client the package builds.

``httpx`` loads the CA bundle for each client it makes (60-100 ms); clients built
per call (REST calls, MatrixLab runs and health checks) pass this one context as
``verify=`` instead. Verification stays on: it is ``httpx``'s own default context
(``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured as they are at first use).
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The shared verifying context, made once on first use."""
    return httpx.create_ssl_context()
