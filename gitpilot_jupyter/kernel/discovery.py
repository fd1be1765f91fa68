"""Which client a kernel uses: `local`, a server URL, or `auto` (the server that launched it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from ..sandbox.errors import SandboxError
from .client import LocalClient, SandboxClient
from .rest import API, RestClient


def server_answers(url: str, token: str, timeout: float = 3.0) -> bool:
    """True when the sandbox extension answers ``GET /api/sandbox/status`` at ``url``."""
    headers = {"Authorization": f"token {token}"} if token else {}
    try:
        response = httpx.get(url.rstrip("/") + f"/{API}/status", headers=headers, timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and "backend" in _json_or_empty(response)


def _json_or_empty(response: httpx.Response) -> dict[str, Any]:
    try:
        data = response.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def launching_server(
    runtime_dirs: list[str] | None = None, parent_pid: int | None = None
) -> dict[str, Any] | None:
    """The runtime info of the Jupyter server that launched this kernel, if any.

    A kernel's parent process is the server that started it (jupyter_client also
    sets ``JPY_PARENT_PID``); the server's ``jpserver-<pid>.json`` runtime file
    holds its URL and token.
    """
    from jupyter_core.paths import jupyter_runtime_dir
    from jupyter_server.serverapp import list_running_servers

    pids = {parent_pid} if parent_pid else _parent_pids()
    dirs = runtime_dirs if runtime_dirs is not None else _runtime_dirs(jupyter_runtime_dir())
    for folder in dirs:
        for info in list_running_servers(folder):
            if info.get("pid") in pids:
                return dict(info)
    return None


def _parent_pids() -> set[int]:
    pids = {os.getppid()}
    raw = os.environ.get("JPY_PARENT_PID", "")
    if raw.isdigit():
        pids.add(int(raw))
    return pids


def _runtime_dirs(default: str) -> list[str]:
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
        info = launching_server()
        if info is not None:
            url, found_token = str(info.get("url", "")), str(info.get("token", ""))
            if url and server_answers(url, found_token):
                return RestClient(url, found_token)
        return LocalClient()
    if choice.startswith(("http://", "https://")):
        return RestClient(choice, token or os.environ.get("JUPYTER_TOKEN", ""))
    raise SandboxError(
        f"server must be 'auto', 'local' or an http(s) URL, got {server!r}", code="invalid_setting"
    )
