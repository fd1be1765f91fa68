"""client.server: the one place agents, the CLI and the kernel find a Jupyter server."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx

from gitpilot_jupyter.client.server import (
    TOKEN_ENV,
    URL_ENV,
    discover_server,
    error_from_answer,
    runtime_servers,
    unreachable,
)
from gitpilot_jupyter.sandbox.errors import ServerUnreachable


def write_runtime(folder: Path, pid: int, port: int) -> Path:
    path = folder / f"jpserver-{pid}.json"
    info = {"url": f"http://127.0.0.1:{port}/", "token": f"t{pid}", "pid": pid}
    path.write_text(json.dumps(info), encoding="utf-8")
    return path


def test_runtime_files_of_live_processes_only(tmp_path: Path) -> None:
    write_runtime(tmp_path, os.getpid(), 9)
    write_runtime(tmp_path, 2**22 + 7, 10)  # beyond pid_max: no such process
    (tmp_path / "jpserver-1.json").write_text("{half", encoding="utf-8")
    [found] = runtime_servers([str(tmp_path), str(tmp_path / "missing")])
    assert found.pid == os.getpid() and found.token == f"t{os.getpid()}"
    assert found.url == "http://127.0.0.1:9/" and found.found_in.endswith(".json")


def test_env_vars_win_and_servers_without_the_extension_are_skipped(tmp_path: Path) -> None:
    named = discover_server({URL_ENV: "http://example.invalid:1", TOKEN_ENV: "tok"}, [])
    assert named is not None and named.url == "http://example.invalid:1/"
    assert named.token == "tok" and named.found_in == URL_ENV
    write_runtime(tmp_path, os.getpid(), 9)  # alive, but nothing answers on port 9
    assert discover_server({}, [str(tmp_path)]) is None


def test_error_answers_keep_the_servers_code() -> None:
    coded = httpx.Response(409, json={"message": "already decided", "code": "plan_not_found"})
    error = error_from_answer(coded)
    assert (error.code, error.message, error.status) == ("plan_not_found", "already decided", 409)
    bare = error_from_answer(httpx.Response(404, text="<html>"))
    assert bare.code == "not_found" and "HTTP 404" in bare.message
    assert error_from_answer(httpx.Response(502)).code == "server_error"
    gone = unreachable("http://h/", httpx.ConnectError("refused"))
    assert isinstance(gone, ServerUnreachable) and gone.code == "server_unreachable"
