"""Attacks on the warm pool: a snippet that read ``sandbox/local/pool.py``.

A slot is a cold run's chain started before its code exists; the code arrives
through a FIFO that bubblewrap copies into the run folder (``--file``). Each
attack goes through the REST flow (the ``pool`` fixture runs it cold and warm:
warm must behave exactly as cold) and is checked from outside.
"""

from __future__ import annotations

import asyncio
import time

from tests.server.helpers import Api

from .conftest import attack

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
