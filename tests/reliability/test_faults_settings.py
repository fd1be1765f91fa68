"""Faults of the settings file, through the REST API of a real server.

Corrupt, unreadable, or in a read-only folder: status reports it, runs go on
with what can be read, nothing else is lost, and the next request works.
50 concurrent writers: the file is valid JSON at every moment and one writer wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.system import require_system

from .conftest import Live

GOOD = {"sandbox": {"timeout_sec": 42}, "gitpilot": {"model": "kept"}}


@pytest.fixture
def settings_file(live: Live) -> Iterator[Path]:
    """The server's settings file, reset to known content before and after each test."""
    path = live.server.config_dir / "settings.json"

    def reset() -> None:
        if path.is_dir():
            shutil.rmtree(path)
        for stale in path.parent.glob("settings.json.bad-*"):
            shutil.rmtree(stale) if stale.is_dir() else stale.unlink()
        path.write_text(json.dumps(GOOD))

    reset()
    yield path
    reset()


def _runs(live: Live) -> None:
    answer = live.run("python", "print('runs')")
    assert answer.status_code == 200 and answer.json()["stdout"] == "runs\n", answer.text


def test_corrupt_file_uses_defaults_and_is_kept_aside(live: Live, settings_file: Path) -> None:
    settings_file.write_text('{"sandbox": {"timeout_sec": 42,')  # cut mid-write
    status = live.http.get("/api/sandbox/status").json()
    assert "not valid JSON" in status["settings_error"], status
    assert status["settings"]["timeout_sec"] == 120  # defaults
    _runs(live)
    saved = live.http.put("/api/sandbox/config", json={"timeout_sec": 30})
    assert saved.status_code == 200 and saved.json()["settings_error"] is None, saved.text
    copies = list(settings_file.parent.glob("settings.json.bad-*"))
    assert len(copies) == 1 and copies[0].read_text().startswith('{"sandbox"')
    assert json.loads(settings_file.read_text())["sandbox"] == {"timeout_sec": 30}


def test_unreadable_file_is_reported_and_runs_go_on(live: Live, settings_file: Path) -> None:
    # A folder where the file should be: unreadable even for root (chmod 000 is not).
    settings_file.unlink()
    settings_file.mkdir()
    status = live.http.get("/api/sandbox/status")
    assert status.status_code == 200, status.text
    assert "cannot read" in status.json()["settings_error"], status.text
    _runs(live)
    saved = live.http.put("/api/sandbox/config", json={"timeout_sec": 31})
    assert saved.status_code == 200, saved.text
    assert json.loads(settings_file.read_text())["sandbox"] == {"timeout_sec": 31}


@contextlib.contextmanager
def _read_only(folder: Path) -> Iterator[None]:
    """Bind-mount ``folder`` read-only over itself (root); skip or fail where that is impossible."""
    can_mount = os.geteuid() == 0 and shutil.which("mount") is not None
    require_system("mount (root)", can_mount, "a read-only folder needs a read-only bind mount")
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_read_only_folder_refuses_saving_clearly(live: Live, settings_file: Path) -> None:
    with _read_only(settings_file.parent):
        answer = live.http.put("/api/sandbox/config", json={"timeout_sec": 33})
        assert answer.status_code == 503, answer.text
        body = answer.json()
        assert body["code"] == "settings_not_saved", body
        assert str(settings_file) in body["message"] and "Read-only" in body["message"], body
        # Everything the user had still applies, and runs go on.
        assert live.http.get("/api/sandbox/config").json()["timeout_sec"] == 42
        _runs(live)
    assert json.loads(settings_file.read_text()) == GOOD
    assert live.http.put("/api/sandbox/config", json={"timeout_sec": 34}).status_code == 200


def test_fifty_concurrent_writers_one_wins(live: Live, settings_file: Path) -> None:
    seen_invalid: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            text = settings_file.read_text()
            try:
                json.loads(text)
            except ValueError:
                seen_invalid.append(text)

    watcher = threading.Thread(target=watch)
    watcher.start()

    async def write_all() -> list[int]:
        # 40 writers through the server, 10 through the CLI in their own processes, at once.
        env = {**os.environ, "GITPILOT_CONFIG_DIR": str(settings_file.parent)}
        cli = [
            await asyncio.create_subprocess_exec(
                str(Path(sys.executable).with_name("jupyter-sandbox")),
                "config",
                "--set",
                f"timeout_sec={100 + i}",
                "--set",
                f"matrixlab_image=writer-{i}",
                env=env,
                stdout=asyncio.subprocess.DEVNULL,
            )
            for i in range(40, 50)
        ]
        async with live.server.async_client() as http:
            answers = await asyncio.gather(
                *(
                    http.put(
                        "/api/sandbox/config",
                        json={"timeout_sec": 100 + i, "matrixlab_image": f"writer-{i}"},
                    )
                    for i in range(40)
                )
            )
        exits = [await proc.wait() for proc in cli]
        return [a.status_code for a in answers] + [200 if code == 0 else code for code in exits]

    try:
        codes = asyncio.run(write_all())
    finally:
        stop.set()
        watcher.join()
    assert codes == [200] * 50
    assert seen_invalid == []
    doc = json.loads(settings_file.read_text())
    assert doc["gitpilot"] == {"model": "kept"}
    winner = doc["sandbox"]["timeout_sec"] - 100
    assert 0 <= winner < 50 and doc["sandbox"]["matrixlab_image"] == f"writer-{winner}", doc
    assert oct(settings_file.stat().st_mode & 0o777) == "0o600"
    assert not list(settings_file.parent.glob(".settings.*.tmp"))
