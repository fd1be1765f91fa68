"""Attacks on the warm pool: a snippet that read ``sandbox/local/pool.py``.

A slot is a cold run's chain started before its code exists; the code arrives
through a FIFO that bubblewrap copies into the run folder (``--file``). Each
attack goes through the REST flow (the ``pool`` fixture runs it cold and warm:
warm must behave exactly as cold) and is checked from outside.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.helpers import Api

from .conftest import attack


async def slots_waiting(api: Api, pool: str, count: int = 1) -> None:
    """Warm: wait until ``count`` slots wait for code (as status shows them); cold: return."""
    deadline = time.monotonic() + 60
    while pool == "warm":
        answer = await api("GET", "api/sandbox/status")
        if answer.body["pool"]["idle"] >= count:
            return
        assert time.monotonic() < deadline, answer.body["pool"]
        await asyncio.sleep(0.1)


# -- 10: the code itself kills the slot while it is being handed over -----------------------

#: Valid Python whatever its length: a print, then one long comment. Its UTF-8 form is
#: 1.3 MB: past a 1 MiB file-size cap by far more than the FIFO's buffer holds (64 KiB);
#: its JSON (a euro sign is 3 bytes in UTF-8, 6 escaped) stays under the 2 MB body cap.
BIG = "print('ran')\n#" + "x" * 820_000 + "\u20ac" * 170_000 + "\n"


async def test_10_code_past_the_file_size_cap_fails_at_once_warm_or_cold(api: Api) -> None:
    # bubblewrap copies the code under the run's rlimits: past the file-size cap it dies
    # mid-copy. A cold run then fails at once; a warm slot's hand-over wrote into a FIFO
    # nobody read any more and the run hung past its timeout (and past any stop).
    answer = await api("PUT", "api/sandbox/config", {"max_file_size_mb": 1})
    assert answer.code == 200, answer.text
    started = time.monotonic()
    result = await asyncio.wait_for(attack(api, BIG, timeout_sec=3), 60)
    took = time.monotonic() - started
    assert result["exit_code"] not in (0, -1) and not result["timed_out"], result
    assert "File too large" in result["stderr"], result["stderr"]
    assert "ran" not in result["stdout"]
    assert took < 30, f"the run answered after {took:.1f} s (timeout 3 s)"


# -- 4: a hidden folder the host replaces while a slot waits ---------------------------------


@pytest.fixture
def secret_folder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A Jupyter data folder with a world-readable token, in a tree a run sees.

    (The interpreter's folder: credentials outside every visible tree need no cover.)
    """
    if not os.access(sys.prefix, os.W_OK):
        pytest.skip(f"{sys.prefix} (the interpreter's folder) is not writable by this user")
    folder = Path(sys.prefix) / f".gitpilot-redteam-{secrets.token_hex(4)}"
    folder.mkdir(mode=0o755)
    monkeypatch.setenv("JUPYTER_PATH", str(folder))  # read again for every run
    yield folder
    for path in (folder, folder.with_name(folder.name + ".old")):
        shutil.rmtree(path, ignore_errors=True)


READ = r"""
import json, os, sys
out = {}
for path in sys.argv[1:] or [%(token)r]:
    try:
        out[path] = open(path).read()
    except OSError as exc:
        out[path] = type(exc).__name__
out["listing"] = os.listdir(%(folder)r)
print(json.dumps(out))
"""


async def test_4_a_hidden_folder_replaced_after_the_slot_started_stays_hidden(
    api: Api, pool: str, secret_folder: Path
) -> None:
    # A bind mount covers the folder a path named when the slot was made. The host
    # replacing that folder (rename away, make again: an atomic save, a reinstall) moves
    # the cover with the old one: a slot made before would show the new one to its run.
    token = secret_folder / "token"
    old, new = (f"gitpilot-{kind}-{secrets.token_hex(6)}" for kind in ("old", "new"))
    token.write_text(old)
    token.chmod(0o644)
    code = READ % {"token": str(token), "folder": str(secret_folder)}
    first = json.loads((await attack(api, code))["stdout"])
    assert first == {str(token): "FileNotFoundError", "listing": []}, first
    await slots_waiting(api, pool)
    secret_folder.rename(secret_folder.with_name(secret_folder.name + ".old"))
    secret_folder.mkdir(mode=0o755)
    token.write_text(new)
    token.chmod(0o644)
    result = await attack(api, code)
    assert new not in result["stdout"] and old not in result["stdout"], result
    assert json.loads(result["stdout"]) == first
