"""What the MatrixLab Runner protocol says, as data and small functions.

The protocol is written down in ``docs/dev/matrixlab-runner.md``.

The banner and timeout marks to absorb, image aliases by language, the bearer
header, and the typed errors for transport failures and Runner error answers.
"""

from __future__ import annotations

import re

import httpx

from ..errors import BackendFailure, BackendUnreachable

#: How much of a Runner error body a message quotes.
BODY_EXCERPT_CHARS = 400

#: The line the Runner puts before a step's stdout.
BANNER = re.compile(r"\A== Matrix Lab step: command ==\r?\n")
#: How the Runner ends stderr when it killed a run at its timeout (exit 124).
TIMEOUT_MARK = re.compile(r"(?:\r?\n)?TIMEOUT[ \t]*(?:\r?\n)?\Z")
#: Words of a 500 body that may be the Runner's failed-timeout answer.
TIMEOUT_WORDS = re.compile(r"time[ _-]?out|timed[ _-]?out|TimeoutExpired", re.IGNORECASE)
#: Runner image aliases by canonical language (its per-language defaults).
IMAGE_ALIASES = {"python": "python", "javascript": "node", "bash": "bash"}
_IMAGE_HINTS = (
    ("javascript", ("node", "javascript", "-js", "deno", "bun")),
    ("bash", ("utils", "bash", "shell", "busybox", "alpine")),
    ("python", ("python", "py3", "jupyter", "conda", "scipy")),
)


def image_language(image: str) -> str:
    """The language an image serves, guessed from its name; python when nothing says otherwise."""
    name = image.lower().rsplit("/", 1)[-1]
    for language, words in _IMAGE_HINTS:
        if any(word in name for word in words):
            return language
    return "python"


def auth_headers(token: str) -> dict[str, str]:
    """``Authorization: Bearer <token>`` when a token is set."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def body_excerpt(response: httpx.Response) -> str:
    """The first 400 characters of a response body, for error messages."""
    return response.text[:BODY_EXCERPT_CHARS]


def unreachable(url: str, exc: Exception, timeout: float | None = None) -> BackendUnreachable:
    """The 503 error for a transport failure talking to the Runner at ``url``."""
    if isinstance(exc, httpx.TimeoutException):
        waited = f" within {timeout:g} s" if timeout else ""
        detail = f"the MatrixLab Runner at {url} did not answer{waited}"
    else:
        detail = f"cannot reach the MatrixLab Runner at {url}: {exc or type(exc).__name__}"
    return BackendUnreachable(
        f"{detail}. Check that it runs and the URL is right (`jupyter sandbox matrixlab test`)."
    )


def runner_error(url: str, path: str, response: httpx.Response) -> BackendFailure:
    """The 502 error for a Runner answering an error status."""
    hint = ""
    if response.status_code == 401:
        hint = " Set matrixlab_token to the Runner's MATRIXLAB_BEARER_TOKEN."
    return BackendFailure(
        f"the MatrixLab Runner at {url} answered {response.status_code} on {path}: "
        f"{body_excerpt(response)}{hint}"
    )
