"""A real JupyterLab for browser tests: private dirs, a token, a demo root folder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.live_server import LiveServer, free_port, start_live_server

__all__ = [
    "DEMO_MARKDOWN",
    "DEMO_NOTEBOOK",
    "DEMO_SCRIPT",
    "SLOW_SCRIPT",
    "Lab",
    "free_port",
    "start_lab",
]

DEMO_NOTEBOOK = "demo.ipynb"
DEMO_MARKDOWN = "guide.md"
DEMO_SCRIPT = "hello.py"
SLOW_SCRIPT = "slow.py"


def _markdown_cell(text: str) -> dict[str, Any]:
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def write_demo_root(root: Path) -> None:
    """The files the tests open: a notebook and a Markdown file with fences, a script."""
    root.mkdir(parents=True, exist_ok=True)
    cells = [
        _markdown_cell("# Demo\n\nAdd two numbers:\n\n```python\nprint(2+2)\n```\n"),
        _markdown_cell("Say hello:\n\n```bash\necho cancelled-run\n```\n"),
        _markdown_cell("Never:\n\n```sh\nrm -rf /\n```\n"),
        _markdown_cell('Not runnable:\n\n```json\n{"a": 1}\n```\n'),
        _markdown_cell(
            "Slow:\n\n```py\nimport time\nprint('first', flush=True)\ntime.sleep(4)\n"
            "print('second')\n```\n"
        ),
        _markdown_cell(
            "Long:\n\n```python\nimport time\nprint('started', flush=True)\n"
            "time.sleep(90)\nprint('never printed')\n```\n"
        ),
        _markdown_cell("Big:\n\n```python\nprint('x' * 5_000_000)\n```\n"),
        _markdown_cell("Risky:\n\n```python\nimport os\nos.system('echo risky-ran')\n```\n"),
    ]
    # nbformat 4.5 wants cell ids: without them the lab adds some and the notebook opens modified.
    for number, cell in enumerate(cells):
        cell["id"] = f"demo-{number}"
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
    (root / SLOW_SCRIPT).write_text(
        "import time\nprint('slow started', flush=True)\ntime.sleep(90)\nprint('never printed')\n",
        encoding="utf-8",
    )


@dataclass
class Lab:
    """A running JupyterLab (a live server with the lab extension) and helpers for tests."""

    server: LiveServer

    @property
    def token(self) -> str:
        """The server's token."""
        return self.server.token

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Call the server's REST API with the token, as a script or another client would."""
        with self.server.client(timeout=30) as http:
            return http.request(method, f"/{path}", **kwargs)

    def page_url(self, path: str = "lab") -> str:
        """A lab URL that logs the browser in with the token."""
        sep = "&" if "?" in path else "?"
        return f"{self.server.url}/{path}{sep}token={self.server.token}"

    def stop(self) -> None:
        """Stop the server and its kernels."""
        self.server.stop()


def start_lab(workdir: Path, env: dict[str, str] | None = None) -> Lab:
    """Start a server with JupyterLab and the sandbox; every Jupyter folder is under ``workdir``.

    ``env`` adds to the server's environment (e.g. the MatrixLab lifecycle switched on).
    """
    write_demo_root(workdir / "root")
    settings, workspaces = workdir / "lab-settings", workdir / "lab-workspaces"
    news = settings / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)
    workspaces.mkdir()
    (news / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    dirs = {
        "JUPYTERLAB_SETTINGS_DIR": str(settings),
        "JUPYTERLAB_WORKSPACES_DIR": str(workspaces),
        # Its administrator allows off: the pass-through tests switch to it from the UI.
        "GITPILOT_SANDBOX_ALLOWED_BACKENDS": "subprocess,matrixlab,off",
    }
    # The test server exposes the app so a test can switch themes with the lab's own command.
    args = ["--LabApp.expose_app_in_browser=True"]
    return Lab(start_live_server(workdir, env={**dirs, **(env or {})}, args=args))
