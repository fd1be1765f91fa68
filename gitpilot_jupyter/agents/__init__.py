"""The sandbox for agents: ``run_in_sandbox``, ``run_command``, sessions and an MCP server.

The plain functions below answer the text a model should read. They share one
:class:`AgentSandbox` configured from the environment (``GITPILOT_AGENT_APPROVAL``,
``GITPILOT_JUPYTER_URL`` / ``GITPILOT_JUPYTER_TOKEN``); build your own
:class:`AgentSandbox` for other settings or for structured replies.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..client.server import TOKEN_ENV, URL_ENV
from .approval import APPROVAL_ENV, APPROVAL_MODES
from .render import render_result, shorten
from .tools import AgentReply, AgentSandbox

__all__ = [
    "APPROVAL_ENV",
    "APPROVAL_MODES",
    "TOKEN_ENV",
    "URL_ENV",
    "AgentReply",
    "AgentSandbox",
    "close_session",
    "default_sandbox",
    "list_sessions",
    "open_session",
    "render_result",
    "run_command",
    "run_in_sandbox",
    "run_in_session",
    "sandbox_status",
    "shorten",
    "wait_for_approval",
]

_default: AgentSandbox | None = None
_lock = threading.Lock()


def default_sandbox() -> AgentSandbox:
    """The process-wide :class:`AgentSandbox`, configured from the environment on first use."""
    global _default
    with _lock:
        if _default is None:
            _default = AgentSandbox()
        return _default


def run_in_sandbox(language: str, code: str, timeout_sec: int | None = None) -> str:
    """Run ``code`` (python, javascript or bash) in the sandbox; the result as text.

    In ``ask`` mode (the default) the answer says the plan waits for a person's
    approval and gives its ``plan_id`` for :func:`wait_for_approval`.
    """
    return default_sandbox().run_in_sandbox(language, code, timeout_sec).text


def run_command(command: str, timeout_sec: int | None = None) -> str:
    """Run a bash command line in the sandbox; the result as text."""
    return default_sandbox().run_command(command, timeout_sec).text


def open_session(name: str | None = None) -> str:
    """Open a session: a Python kernel in the sandbox that keeps its state between cells."""
    return default_sandbox().open_session(name).text


def run_in_session(
    session: str,
    code: str,
    timeout_sec: int | None = None,
    inputs: Sequence[str] | None = None,
) -> str:
    """Run a python cell in ``session`` (planned and approved as any run; ``inputs``:
    paths of files or folders, each ``./NAME`` in the session's folder from this cell on,
    listed in the plan); the result as text."""
    return default_sandbox().run_in_session(session, code, timeout_sec, inputs).text


def close_session(session: str) -> str:
    """Stop ``session``: its kernel, variables and files are gone."""
    return default_sandbox().close_session(session).text


def list_sessions() -> str:
    """The open sessions, as text."""
    return default_sandbox().list_sessions().text


def wait_for_approval(plan_id: str, wait_sec: float = 60.0) -> str:
    """Wait for a person to approve ``plan_id`` (made by this process), then run it."""
    return default_sandbox().wait_for_approval(plan_id, wait_sec).text


def sandbox_status() -> str:
    """The sandbox's backend, health, isolation and the agents' approval mode, as text."""
    return default_sandbox().status().text
