"""What the MatrixLab Runner protocol says, as data and small functions.

The protocol is written down in ``docs/dev/matrixlab-runner.md``.

The banner and timeout marks to absorb, image aliases by language, where a snippet
lives inside the Runner's container, the limits the Runner holds to, the bearer
header, and the typed errors for transport failures and Runner error answers.
"""

from __future__ import annotations

import re
from typing import Any

import httpx

from ..errors import BackendBusy, BackendFailure, BackendUnreachable, RunOutcomeUnknown
from .excerpt import BODY_EXCERPT_CHARS, readable_excerpt
from .load import BUSY_RETRY_SEC
from .wrapper import MISSING_MARK

#: The line the Runner puts before a step's stdout.
BANNER = re.compile(r"\A== Matrix Lab step: command ==\r?\n")
#: How the Runner ends stderr when it killed a run at its own timeout (exit 124).
TIMEOUT_MARK = re.compile(r"(?:\r?\n)?TIMEOUT[ \t]*(?:\r?\n)?\Z")
#: The exit code the Runner gives a run it killed at its timeout.
RUNNER_TIMEOUT_EXIT = 124
#: Exit codes of the Runner's own failures: 999 "Runner error: ..." and 125, Docker's
#: "the container could not be created or started" (an image that cannot be pulled).
RUNNER_ERROR_EXIT = 999
DOCKER_RUN_FAILED_EXIT = 125
#: The body of this Runner version's 500 when a run wrote to stderr before its timeout.
TIMEOUT_500 = re.compile(r"can't concat str to bytes|time[ _-]?out|timed[ _-]?out", re.IGNORECASE)
#: Runner image aliases (``/run``'s ``image``) by canonical language. ``bash`` is not one.
IMAGE_ALIASES = {"python": "python", "javascript": "node", "bash": "utils"}
_IMAGE_HINTS = (
    ("javascript", ("node", "javascript", "-js", "deno", "bun")),
    ("bash", ("utils", "bash", "shell", "busybox", "alpine")),
    ("python", ("python", "py3", "jupyter", "conda", "scipy")),
)

#: The folder a run's workspace is mounted at inside the Runner's container.
WORKSPACE_DIR = "/workspace"
#: The snippet's file in the workspace and the interpreter that runs it, by language.
SNIPPET_FILES = {"python": "main.py", "javascript": "main.js", "bash": "main.sh"}
INTERPRETERS = {"python": "python", "javascript": "node", "bash": "bash"}

#: The Runner's bounds (``/code/run`` refuses values below them; we raise ours to them).
MIN_MEMORY_MB, MAX_MEMORY_MB = 128, 32768
MIN_PIDS, MAX_PIDS = 16, 4096
#: The Runner caps every run's timeout at this many seconds (its MATRIXLAB_MAX_TIMEOUT_SEC).
MAX_RUNNER_TIMEOUT_SEC = 900


def runner_command(language: str) -> list[str]:
    """The command a snippet runs as in the Runner's container, e.g. ``python /workspace/main.py``.

    It names the file the way tracebacks and error messages from the container do.
    """
    return [INTERPRETERS[language], f"{WORKSPACE_DIR}/{SNIPPET_FILES[language]}"]


def image_repository(image: str) -> str:
    """The repository name of an image reference: no registry, path, tag or digest."""
    name = image.strip().lower().split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def image_language(image: str) -> str:
    """The language an image serves, guessed from its repository name (never its tag).

    ``python:3.12-alpine`` is a python image; python when nothing says otherwise.
    """
    name = image_repository(image)
    for language, words in _IMAGE_HINTS:
        if any(word in name for word in words):
            return language
    return "python"


def auth_headers(token: str) -> dict[str, str]:
    """``Authorization: Bearer <token>`` when a token is set."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def body_excerpt(response: httpx.Response) -> str:
    """The first 400 characters of a response body, for error messages (an HTML page as text)."""
    return readable_excerpt(response.text, BODY_EXCERPT_CHARS)


def health_document(response: httpx.Response) -> dict[str, Any] | None:
    """The Runner's ``/health`` answer: a 2xx JSON object with ``ok``; None for anything else
    (another service listening at the URL)."""
    try:
        body = response.json() if response.is_success else None
    except ValueError:
        return None
    return body if isinstance(body, dict) and "ok" in body else None


def not_a_runner(url: str, response: httpx.Response) -> str:
    """What an answer of ``/health`` that is no Runner's says."""
    return (
        f"{url}/health answered {response.status_code} without a Runner health document: "
        f"{body_excerpt(response)}"
    )


def error_detail(response: httpx.Response) -> str:
    """What a Runner error says, without echoing what we sent.

    A FastAPI 422 lists each refused field with its ``input``: that is the user's
    code or stdin, so only the field, its message and its bound are kept.
    """
    try:
        body: Any = response.json()
    except ValueError:
        return body_excerpt(response)
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if not isinstance(item, dict):
                continue
            loc = ".".join(str(p) for p in item.get("loc", []) if p != "body") or "body"
            part = f"{loc}: {item.get('msg', item.get('type', 'invalid'))}"
            if item.get("type"):
                part += f" ({item['type']})"
            parts.append(part)
        return "; ".join(parts)[:BODY_EXCERPT_CHARS] or body_excerpt(response)
    if isinstance(detail, str):
        return detail[:BODY_EXCERPT_CHARS]
    return body_excerpt(response)


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


def transport_failure(
    url: str, exc: httpx.HTTPError, timeout: float
) -> BackendUnreachable | RunOutcomeUnknown:
    """A run's transport failure: not sent (503, safe to retry), or sent and unanswered.

    Once the request went out, the Runner may be running it (a busy Runner queues it
    and runs it later): that run is never reported as not run.
    """
    if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
        return unreachable(url, exc)
    waited = (
        f"did not answer within {timeout:g} s"
        if isinstance(exc, httpx.TimeoutException)
        else f"dropped the connection ({exc or type(exc).__name__})"
    )
    return RunOutcomeUnknown(
        f"the MatrixLab Runner at {url} took the run but {waited}: it may still be running "
        "there, or have finished, so its outcome is unknown. Check the Runner's load "
        "(`jupyter sandbox matrixlab test`) before running it again."
    )


def busy(url: str, response: httpx.Response) -> BackendBusy:
    """The 429 error for a Runner (or a proxy before it) answering 429 or 503: nothing ran."""
    raw = response.headers.get("Retry-After", "")
    retry = int(raw) if raw.isdigit() else BUSY_RETRY_SEC
    return BackendBusy(
        f"the MatrixLab Runner at {url} is busy ({response.status_code}: "
        f"{error_detail(response)}): retry in {retry} s",
        retry_after=retry,
    )


def runner_error(url: str, path: str, response: httpx.Response) -> BackendFailure:
    """The 502 error for a Runner answering an error status."""
    hint = ""
    if response.status_code == 401:
        hint = " Set matrixlab_token to the Runner's MATRIXLAB_BEARER_TOKEN."
    return BackendFailure(
        f"the MatrixLab Runner at {url} answered {response.status_code} on {path}: "
        f"{error_detail(response)}{hint}"
    )


def runner_failure(url: str, exit_code: int, stderr: str) -> BackendFailure:
    """The 502 error for a run the Runner itself failed (exit 999, Docker's 125, ...)."""
    message = stderr.strip()[:BODY_EXCERPT_CHARS].rstrip(". ") or "(no message)"
    if MISSING_MARK in message:
        # Our wrapper found no interpreter: the image, not the snippet, is at fault.
        command = message.split(MISSING_MARK, 1)[1].split()[0]
        return BackendFailure(
            f"the MatrixLab Runner at {url} could not run the snippet: its image has no "
            f"`{command}` command (exit {exit_code}), so no snippet of this language runs "
            "there. Set matrixlab_image to an image that has it, or leave it empty for the "
            "Runner's default."
        )
    what = {
        RUNNER_ERROR_EXIT: "failed the run",
        DOCKER_RUN_FAILED_EXIT: "could not start the run's container",
    }.get(exit_code, "ended the run's container before the snippet finished")
    return BackendFailure(
        f"the MatrixLab Runner at {url} {what} (exit {exit_code}): {message}. "
        "This is the Runner's failure, not the snippet's; `docker logs` of the Runner says more."
    )


# -- the token -------------------------------------------------------------------------

#: A protected route answered with an empty body: 401 for a bad token, 422 otherwise
#: (FastAPI checks the bearer dependency before the body), so nothing ever runs.
TOKEN_CHECK_PATH = "/code/run"


async def token_answer(client: httpx.AsyncClient, url: str, token: str) -> httpx.Response:
    """``POST /code/run {}`` with ``token``: 401 = refused, 422 = accepted (nothing runs)."""
    return await client.post(url + TOKEN_CHECK_PATH, json={}, headers=auth_headers(token))
