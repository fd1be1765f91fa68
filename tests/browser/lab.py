"""A real ``jupyter lab`` for browser tests: private dirs, a token, a demo root folder."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

DEMO_NOTEBOOK = "demo.ipynb"
DEMO_MARKDOWN = "guide.md"
DEMO_SCRIPT = "hello.py"


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _markdown_cell(text: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def write_demo_root(root: Path) -> None:
    """The files the tests open: a notebook and a Markdown file with fences, a script."""
    cells = [
        _markdown_cell("# Demo\n\nAdd two numbers:\n\n```python\nprint(2+2)\n```\n"),
        _markdown_cell("Say hello:\n\n```bash\necho cancelled-run\n```\n"),
        _markdown_cell("Never:\n\n```sh\nrm -rf /\n```\n"),
        _markdown_cell('Not runnable:\n\n```json\n{"a": 1}\n```\n'),
    ]
    notebook = {
        "cells": cells,
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (root / DEMO_NOTEBOOK).write_text(json.dumps(notebook), encoding="utf-8")
    (root / DEMO_MARKDOWN).write_text(
        "# Guide\n\n```js\nconsole.log(6 * 7)\n```\n", encoding="utf-8"
    )
    (root / DEMO_SCRIPT).write_text(
        "import sys\nprint('hello from', sys.argv[0].rsplit('/', 1)[-1] or 'file')\n",
        encoding="utf-8",
    )


@dataclass
class Lab:
    """A running JupyterLab: where it is, its token, and an API helper."""

    url: str
    token: str
    root: Path
    config_dir: Path
    process: subprocess.Popen[bytes]
    log: Path

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Call the server's REST API with the token (as a script or another client would)."""
        headers = {"Authorization": f"token {self.token}"}
        return httpx.request(method, f"{self.url}{path}", headers=headers, timeout=30, **kwargs)

    def page_url(self, path: str = "lab") -> str:
        """A lab URL that logs the browser in with the token."""
        sep = "&" if "?" in path else "?"
        return f"{self.url}{path}{sep}token={self.token}"


def start_lab(base: Path) -> Lab:
    """Start ``jupyter lab`` with every Jupyter and sandbox folder private to ``base``."""
    root, config, settings, workspaces, sandbox = (
        base / name for name in ("root", "config", "settings", "workspaces", "gitpilot")
    )
    for folder in (root, config, settings, workspaces, sandbox):
        folder.mkdir(parents=True, exist_ok=True)
    write_demo_root(root)
    news = settings / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    (news / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GITPILOT_", "JUPYTER"))},
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(workspaces),
        "GITPILOT_CONFIG_DIR": str(sandbox),
    }
    port, token = free_port(), secrets.token_hex(16)
    log = base / "lab.log"
    argv = [
        sys.executable, "-m", "jupyter", "lab", "--no-browser",
        f"--port={port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}", "--ServerApp.terminals_enabled=False",
        "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=",
    ]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-root")
    process = subprocess.Popen(argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    lab = Lab(f"http://127.0.0.1:{port}/", token, root, sandbox, process, log)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited:\n{log.read_text()[-3000:]}")
        try:
            if lab.api("GET", "api/sandbox/status").status_code == 200:
                return lab
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    stop_lab(lab)
    raise RuntimeError(
        f"jupyter lab did not answer /api/sandbox/status:\n{log.read_text()[-3000:]}"
    )


def stop_lab(lab: Lab) -> None:
    """Stop the server (and its kernels) and wait for it."""
    lab.process.terminate()
    try:
        lab.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        lab.process.kill()
        lab.process.wait(timeout=10)
