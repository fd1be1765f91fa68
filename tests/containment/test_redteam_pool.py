"""Attacks on the warm pool: a snippet that read ``sandbox/local/pool/``.

A slot is a cold run's chain started before its code exists; the code arrives
through a FIFO that bubblewrap copies into the run folder (``--file``). Each
attack goes through the REST flow (the ``pool`` fixture runs it cold and warm:
warm must behave exactly as cold) and is checked from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local import nsfree
from gitpilot_jupyter.sandbox.local.mplfonts import RUN_CONFIG_DIR
from tests.server.helpers import Api

from .conftest import attack, nonce, runs_drop_groups, status_fields, wait_for_process


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

    (The interpreter's folder: credentials outside every visible tree need no cover. As
    an ordinary user, whose venv is root's, scripts/as_docker_user.py names a folder in
    it the user may write.)
    """
    base = Path(os.environ.get("GITPILOT_TEST_VISIBLE_FOLDER") or sys.prefix)
    if not os.access(base, os.W_OK):
        pytest.skip(
            f"{base} (the interpreter's folder) is not writable by this user "
            "(scripts/as_docker_user.py gives its user a folder there)"
        )
    folder = base / f".gitpilot-redteam-{secrets.token_hex(4)}"
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


# -- 6: one run reaching another that runs beside it, or a slot that waits -------------------

#: Leaves something in every place a run can write or listen, then waits (a sleeper the
#: host can see, under ``name``) and says whether any of it was touched meanwhile.
VICTIM = r"""
import ctypes, json, os, socket, subprocess, sys
name = %(name)r
for path in ("left", "/tmp/left", "/dev/shm/left"):
    open(path, "w").write(name)
os.mkfifo("fifo")
listener = socket.socket(socket.AF_UNIX)
listener.bind("\0" + name)
listener.listen(5)
listener.setblocking(False)
libc = ctypes.CDLL(None, use_errno=True)
shm = libc.shmget(0x6770, 4096, 0o1666)  # a System V segment anyone may attach
subprocess.run([name, "30"], executable="/bin/sleep")  # killed by the test
try:
    listener.accept()
    called = True
except BlockingIOError:
    called = False
left = [open(p).read() == name for p in ("left", "/tmp/left", "/dev/shm/left")]
print(json.dumps({"called": called, "left": left, "shm": shm >= 0}))
"""

#: Looks for the victim (and any waiting slot) everywhere a run could meet another.
INTRUDER = r"""
import glob, json, os, signal, socket
name = %(name)r
out = {}
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0" + name)
    out["abstract"] = "connected"
except OSError as exc:
    out["abstract"] = type(exc).__name__
here = os.getcwd()
seen = []
for pattern in ("/tmp/*", "/dev/shm/*", "/var/tmp/*", "/tmp/gitpilot-sandbox-*/*"):
    for path in glob.glob(pattern):
        real = os.path.realpath(path)  # (its own run folder, and the folders above it)
        if not real.startswith(here) and not here.startswith(real + "/"):
            seen.append(path)
out["seen"] = sorted(set(seen))
out["ipc"] = {kind: open(f"/proc/sysvipc/{kind}").read().count("\n") - 1
              for kind in ("shm", "msg", "sem")}
alive = []
for pid in range(1, 5000):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        continue
    except PermissionError:
        pass  # there, though not its own
    alive.append(pid)
out["pids"] = alive
# Every mount it may write to is its own run's (the size-capped tmpfs), /proc, /dev/pts
# or one of bubblewrap's device nodes (null, zero, ...): nothing a second run shares.
out["rw"] = []
for line in open("/proc/self/mountinfo"):
    fields, (fstype, source, _) = line.split(" - ")[0].split(), line.split(" - ")[1].split()
    point = fields[4]
    if "rw" not in fields[5].split(",") or source in ("gitpilot-run", "proc", "devpts"):
        continue
    if fstype == "devtmpfs" and os.path.dirname(point) == "/dev" and not os.path.isdir(point):
        continue
    out["rw"].append(f"{point} {fstype} {source}")
out["kill"] = "not tried: it sees other processes"  # (then it would kill the host's)
if alive == [1, 2]:
    try:
        os.kill(-1, signal.SIGKILL)  # everything it may signal, but itself and its init
        out["kill"] = "sent"
    except OSError as exc:
        out["kill"] = type(exc).__name__
print(json.dumps(out))
"""


async def test_6_a_run_cannot_reach_a_run_beside_it_or_a_waiting_slot(
    api: Api, pool: str, reaper: list[str]
) -> None:
    name = nonce("victim")
    reaper.append(name)
    victim = asyncio.ensure_future(attack(api, VICTIM % {"name": name}, timeout_sec=60))
    pid = await asyncio.to_thread(wait_for_process, name)
    assert pid is not None, "the victim's sleeper never showed up"
    await slots_waiting(api, pool)
    result = await attack(api, INTRUDER % {"name": name})
    assert result["exit_code"] == 0, result["stderr"]
    seen = json.loads(result["stdout"])
    os.kill(pid, 0)  # from outside: the victim still runs
    os.kill(pid, signal.SIGKILL)
    left = json.loads((await victim)["stdout"])
    assert left == {"called": False, "left": [True, True, True], "shm": True}, left
    assert seen["abstract"] == "ConnectionRefusedError", seen
    assert seen["seen"] == [], seen["seen"]
    assert seen["ipc"] == {"shm": 0, "msg": 0, "sem": 0}, seen["ipc"]
    assert seen["pids"] == [1, 2], seen["pids"]  # bubblewrap's init and itself
    assert seen["kill"] == "ProcessLookupError", seen  # nobody else to signal
    assert seen["rw"] == [], seen["rw"]


# -- 3: id games inside the run (the maps, setgroups, setuid, the setuid helpers) ------------

ID_GAMES = r"""
import errno, json, os, subprocess
out = {}
for name, text in (("uid_map", "0 0 1\n"), ("gid_map", "0 0 1\n"), ("setgroups", "allow\n")):
    try:
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
            out[name] = "written"
        finally:
            os.close(fd)
    except OSError as exc:
        out[name] = type(exc).__name__
for name, call in (
    ("setgroups([0])", lambda: os.setgroups([0])),
    ("setuid(0)", lambda: os.setuid(0)),
    ("setgid(0)", lambda: os.setgid(0)),
    ("setresuid(server)", lambda: os.setresuid(%(server)d, %(server)d, %(server)d)),
):
    try:
        call()
        out[name] = "done"
    except OSError as exc:
        out[name] = errno.errorcode[exc.errno]  # EINVAL: an id this namespace does not map
# The setuid-root helpers that write maps, and a nested user namespace.
for argv in (["newuidmap", "1", "0", "%(server)d", "1"], ["newgidmap", "1", "0", "0", "1"],
             ["unshare", "--user", "--map-root-user", "id", "-u"]):
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    out[argv[0]] = done.returncode
out["ids"] = [os.getresuid(), os.getresgid(), os.getgroups()]
# Seen from the host while this sleeps.
subprocess.run([%(name)r, "20"], executable="/bin/sleep")
print(json.dumps(out))
"""


async def test_3_id_games_change_nothing_the_host_sees(api: Api, reaper: list[str]) -> None:
    from gitpilot_jupyter.sandbox.local import namespaces

    tool, _ = namespaces.detect("bwrap")
    assert tool is not None and tool.confine is not None
    name = nonce("ids")
    reaper.append(name)
    code = ID_GAMES % {"name": name, "server": os.getuid()}
    run = asyncio.ensure_future(attack(api, code))
    pid = await asyncio.to_thread(wait_for_process, name)
    assert pid is not None, "the snippet's sleeper never showed up"
    creds = status_fields(pid)
    maps = {f: Path(f"/proc/{pid}/{f}").read_text().split() for f in ("uid_map", "gid_map")}
    no_new_privs = "NoNewPrivs:\t1" in Path(f"/proc/{pid}/status").read_text()
    os.kill(pid, signal.SIGKILL)
    seen = json.loads((await run)["stdout"])
    # From inside: nothing written, nothing changed, no helper and no nested namespace.
    assert {k: seen[k] for k in ("uid_map", "gid_map", "setgroups")} == {
        "uid_map": "PermissionError",
        "gid_map": "PermissionError",
        "setgroups": "PermissionError",
    }, seen
    games = ("setgroups([0])", "setuid(0)", "setgid(0)", "setresuid(server)")
    assert {seen[k] for k in games} <= {"EPERM", "EINVAL"}, seen
    assert seen["newuidmap"] != 0 and seen["newgidmap"] != 0 and seen["unshare"] != 0, seen
    # From outside: one id mapped, the run's own; no groups, no capabilities, no new privileges.
    uid, gid = tool.confine.run_ids()
    if tool.confine.as_root:  # each run its own uid (nsfree.RUN_IDS), its gid the same number
        uid = gid = int(creds["Uid"][0])
        assert nsfree.RUN_UID_BASE <= uid < nsfree.RUN_UID_BASE + nsfree.RUN_UID_COUNT, creds
    elif tool.confine.idmap is not None:  # each run its own ids of the subordinate range
        last, count = tool.confine.idmap.uid, tool.confine.idmap.count
        uid, gid = int(creds["Uid"][0]), int(creds["Gid"][0])
        assert last - count < uid < last and uid - gid == last - tool.confine.idmap.gid, creds
    assert maps["uid_map"][1:] == [str(uid), "1"] and maps["gid_map"][1:] == [str(gid), "1"], maps
    assert creds["Uid"] == [str(uid)] * 4 and creds["Gid"] == [str(gid)] * 4, creds
    if runs_drop_groups():
        assert creds["Groups"] == [], creds
    assert int(creds["CapEff"][0], 16) == 0 and no_new_privs, creds


# -- stdin: a run without it reads end of file at once; one with it gets it whole -------------

STDIN = r"""
import os, sys, time
started = time.monotonic()
data = sys.stdin.read()
print(os.readlink("/proc/self/fd/0")[:5], len(data), data[:3], time.monotonic() - started < 1)
"""


async def test_stdin_is_what_the_run_gave_and_nothing_waits_on_it(api: Api) -> None:
    seen = []
    for stdin in (None, "", "abc", "x" * 200_000):
        extra = {} if stdin is None else {"stdin": stdin}
        result = await attack(api, STDIN, timeout_sec=10, **extra)
        seen.append(result["stdout"])
    assert seen == [
        "/dev/ 0  True\n",  # a slot kept for runs with stdin is never handed this one
        "pipe: 0  True\n",
        "pipe: 3 abc True\n",
        "pipe: 200000 xxx True\n",
    ]
    # A snippet that never reads a big stdin still ends at its timeout.
    started = time.monotonic()
    result = await attack(api, "import time; time.sleep(60)", timeout_sec=2, stdin="y" * 300_000)
    assert result["timed_out"] and time.monotonic() - started < 20, result


# -- the code itself: NUL bytes, sizes around the FIFO's buffer, other languages -------------


async def test_odd_code_is_run_whole_and_as_given(api: Api) -> None:
    show = "import sys\nprint(len(open(__file__, 'rb').read()))\n"
    for size in (65535, 65536, 65537, 131072):  # around the FIFO's buffer (64 KiB)
        code = show + "#" * (size - len(show) - 1) + "\n"
        assert len(code.encode()) == size
        result = await attack(api, code)
        assert result["stdout"] == f"{size}\n", (size, result)
    nul = await attack(api, "print('before')\0print('after')\n")
    assert nul["exit_code"] == 1 and "null bytes" in nul["stderr"], nul
    assert nul["stdout"] == ""
    # Not valid UTF-8 once read as bytes? It arrives as text: the bytes are its UTF-8.
    wide = await attack(api, "print(open(__file__, 'rb').read().decode())  # \u20ac\U0001f600\n")
    assert "\u20ac\U0001f600" in wide["stdout"], wide
    shell = await attack(
        api, 'printf \'%s\\n\' "$0"; read -r line; echo "[$line]"', language="bash"
    )
    assert shell["exit_code"] == 0 and shell["stdout"].endswith("[]\n"), shell


# -- 7/8: a burst of runs: one fresh slot each, none outlives its run -------------------------

MINE = r"""
import json, os
mark = %(mark)r
print(json.dumps({"mark": mark, "mine": open(__file__).read().count(mark),
                  "here": sorted(os.listdir(".")), "cwd": os.getcwd(),
                  "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}))
"""


def chains() -> list[int]:
    """This process's children that are a launch chain (the test server runs in it)."""
    out = []
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            for pid in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
                    if Path(argv0.decode(errors="replace")).name in ("bwrap", "unshare", "sh"):
                        out.append(int(pid))
    return out


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (by the kernel's children lists)."""
    found, todo = [], [pid]
    while todo:
        with contextlib.suppress(OSError):
            here = todo.pop()
            for task in Path(f"/proc/{here}/task").iterdir():
                kids = [int(k) for k in (task / "children").read_text().split()]
                found += kids
                todo += kids
    return found


async def test_8_a_burst_of_runs_gets_one_fresh_slot_each(api: Api, pool: str) -> None:
    marks = [nonce("burst") for _ in range(12)]
    results = await asyncio.gather(
        *(attack(api, MINE % {"mark": mark}, timeout_sec=60) for mark in marks)
    )
    seen = [json.loads(r["stdout"]) for r in results]
    assert [s["mark"] for s in seen] == marks
    # (A python run folder may hold its own copy of matplotlib's font list too.)
    fresh = [["inline.py", "out"], [RUN_CONFIG_DIR, "inline.py", "out"]]
    assert all(s["mine"] == 1 and s["here"] in fresh for s in seen), seen
    assert all(s["pids"] == [1, 2] for s in seen), seen
    assert len({s["cwd"] for s in seen}) == len(marks)  # twelve slots, each used once
    # From outside: what is left of the server's launch chains is its waiting slots.
    deadline = time.monotonic() + 30
    while True:
        state = (await api("GET", "api/sandbox/status")).body["pool"]
        left = chains()
        if state["starting"] == 0 and len(left) <= state["idle"]:
            break
        assert time.monotonic() < deadline, (left, state)
        await asyncio.sleep(0.2)
    assert state["idle"] <= state["max_slots"], state
    for pid in left:  # each waits for its code: no snippet runs in any of them
        for child in descendants(pid):
            if Path(f"/proc/{child}/exe").resolve() == Path(sys.executable).resolve():
                # An interpreter started ahead (pool_prestart) still waits in its hook,
                # reading the code: no inline.py in its run folder yet.
                assert "pipe_read" in Path(f"/proc/{child}/wchan").read_text(), pid
                # (A non-root server's runs have their own uid: their folder is not
                # ours to look into; the wait in the pipe read above still shows.)
                with contextlib.suppress(PermissionError):
                    assert not Path(f"/proc/{child}/cwd/inline.py").exists(), pid
