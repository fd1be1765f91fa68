"""The one resolver of every face outside the server: ``auto | local | URL``.

* ``local``: the core in this process.
* a URL: the REST API of that Jupyter server; its token is the one given, else
  ``GITPILOT_JUPYTER_TOKEN``, else ``JUPYTER_TOKEN``.
* ``auto``: the server named by ``GITPILOT_JUPYTER_URL`` (with
  ``GITPILOT_JUPYTER_TOKEN``; the value ``local`` pins the in-process path);
  else the Jupyter server that launched this process (a kernel's parent) when
  its sandbox extension answers; else, with
  ``search=True`` (agents, the CLI), the newest running server whose extension
  answers; else the core in this process.

Finding and probing servers is :mod:`.server`'s job.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..sandbox.errors import InvalidSetting
from ..sandbox.service import SandboxService
from .base import SandboxClient
from .local import LocalClient
from .rest import RestClient
from .server import (
    TOKEN_ENV,
    URL_ENV,
    ServerInfo,
    default_runtime_dir,
    discover_server,
    runtime_servers,
    server_answers,
)


def launching_server(
    runtime_dirs: list[str] | None = None, parent_pid: int | None = None
) -> ServerInfo | None:
    """The Jupyter server that launched this kernel, if any.

    A kernel's parent process is the server that started it (jupyter_client also
    sets ``JPY_PARENT_PID``); the server's ``jpserver-<pid>.json`` runtime file
    holds its URL and token.
    """
    pids = {parent_pid} if parent_pid else _parent_pids()
    dirs = runtime_dirs if runtime_dirs is not None else _runtime_dirs(default_runtime_dir())
    for server in runtime_servers(dirs):
        if server.pid in pids:
            return server
    return None


def _parent_pids() -> set[int]:
    pids = {os.getppid()}
    raw = os.environ.get("JPY_PARENT_PID", "")
    if raw.isdigit():
        pids.add(int(raw))
    return pids


def _runtime_dirs(default: str) -> list[str]:
    # The server may have its own runtime dir: the kernel's connection file lives there too.
    dirs = [default]
    try:
        from ipykernel.connect import get_connection_file

        dirs.append(str(Path(get_connection_file()).parent))
    except Exception:  # not in a kernel: only the default runtime dir
        pass
    return list(dict.fromkeys(dirs))


def make_client(
    server: str = "auto",
    token: str = "",
    *,
    environ: Mapping[str, str] | None = None,
    search: bool = False,
    service: SandboxService | None = None,
    user: str | None = "kernel",
) -> SandboxClient:
    """The client for ``server``: ``auto``, ``local`` or a URL (see the module doc).

    Blocking (``auto`` probes servers): async callers run it in a thread.
    ``service`` is the one a local client drives (default: a new one on the cwd);
    ``user`` is recorded in audit events of local calls.
    """
    env = os.environ if environ is None else environ
    choice = (server or "auto").strip()

    def local() -> LocalClient:
        return LocalClient(service, user=user)

    if choice == "local":
        return local()
    if choice.startswith(("http://", "https://")):
        return RestClient(choice, token or env.get(TOKEN_ENV) or env.get("JUPYTER_TOKEN", ""))
    if choice != "auto":
        raise InvalidSetting(f"server must be 'auto', 'local' or an http(s) URL, got {server!r}")
    named = env.get(URL_ENV, "").strip()
    if named.lower() == "local":  # the env var may pin the in-process path too
        return local()
    if named:
        return RestClient(named, token or env.get(TOKEN_ENV, ""))
    found = launching_server()
    if found is not None and server_answers(found.url, found.token):
        return RestClient(found.url, found.token)
    if search:
        running = discover_server(env)
        if running is not None:
            return RestClient(running.url, running.token)
    return local()
