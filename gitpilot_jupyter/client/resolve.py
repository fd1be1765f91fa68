"""Which client a kernel uses: `local`, a server URL, or `auto` (the server that launched it).

Finding servers is :mod:`.server`'s job; this module only
picks, among them, the one that started this kernel.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..sandbox.errors import SandboxError
from .local import LocalClient, SandboxClient
from .rest import RestClient
from .server import ServerInfo, default_runtime_dir, runtime_servers, server_answers


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


def make_client(server: str, token: str = "") -> SandboxClient:
    """The client for the ``server`` setting: ``local``, ``auto`` or a URL."""
    choice = server.strip()
    if choice == "local":
        return LocalClient()
    if choice == "auto":
        found = launching_server()
        if found is not None and server_answers(found.url, found.token):
            return RestClient(found.url, found.token)
        return LocalClient()
    if choice.startswith(("http://", "https://")):
        return RestClient(choice, token or os.environ.get("JUPYTER_TOKEN", ""))
    raise SandboxError(
        f"server must be 'auto', 'local' or an http(s) URL, got {server!r}", code="invalid_setting"
    )
