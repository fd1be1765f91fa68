"""``jupyter sandbox batch``: real processes, Ctrl-C, resume, exit statuses."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from gitpilot_jupyter.sandbox.batch import ResultLog, read_results

BIN = Path(sys.executable).parent / "jupyter-sandbox"


def write_items(path: Path, n: int, code: str) -> Path:
    lines = [
        json.dumps({"id": f"item-{i}", "language": "bash", "code": code.format(i=i)})
        for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), "batch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )


def test_interrupted_run_keeps_what_finished_and_the_same_command_resumes(tmp_path: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", 40, "sleep 0.3; echo {i}")
    out = tmp_path / "results.jsonl"
    command = [str(BIN), "batch", str(items), "--out", str(out), "--workers", "2", "--yes"]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if out.exists() and len(out.read_text().splitlines()) >= 6:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # Ctrl-C
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    kept = [r["id"] for r in read_results(out)]
    assert 6 <= len(kept) < 40
    assert "run the same command again to resume" in stderr
    # The same command again: only the rest runs, and every item is there exactly once.
    again = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"40 items · 40 ok ({len(kept)} already done)" in again.stderr
    final = [r["id"] for r in read_results(out)]
    assert sorted(final) == sorted(f"item-{i}" for i in range(40))
    assert final[: len(kept)] == kept
    assert all(r["status"] == "ok" for r in read_results(out))


def test_plan_shows_the_summary_and_runs_nothing(tmp_path: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", 3, "touch ran-{i}")
    with items.open("a") as f:
        f.write(json.dumps({"id": "wipe", "language": "bash", "code": "rm -rf /"}) + "\n")
    shown = cli(str(items), "--plan", cwd=tmp_path)
    assert shown.returncode == 0
    assert "4 snippets (4 bash)" in shown.stdout
    assert "BLOCKED (never run): 1: wipe" in shown.stdout and "3 of 4 will run" in shown.stdout
    opened = cli(str(items), "--show", "item-1", cwd=tmp_path)
    assert "touch ran-1" in opened.stdout
    as_json = json.loads(cli(str(items), "--plan", "--json", cwd=tmp_path).stdout)
    assert as_json["count"] == 4 and len(as_json["items"]) == 4
    assert not list(tmp_path.glob("ran-*"))


def test_without_a_terminal_and_without_yes_it_refuses(tmp_path: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", 2, "echo {i}")
    refused = cli(str(items), "--out", "r.jsonl", cwd=tmp_path)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert not (tmp_path / "r.jsonl").exists() or not (tmp_path / "r.jsonl").read_text()


def test_exit_status_says_whether_every_item_succeeded(tmp_path: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", 3, "exit $(( {i} == 2 ))")
    done = cli(str(items), "--out", "r.jsonl", "--yes", "--json", cwd=tmp_path)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert (report["ok"], report["failed"], report["total"]) == (2, 1, 3)
    assert "3 items · 1 failed · 2 ok · " in done.stderr
    missing = cli(str(items), "--yes", cwd=tmp_path)
    assert missing.returncode == 2 and "--out" in missing.stderr
    bad = cli(str(tmp_path / "nope.jsonl"), "--out", "r.jsonl", "--yes", cwd=tmp_path)
    assert bad.returncode == 2 and "cannot read" in bad.stderr


def test_a_second_batch_on_the_same_results_file_is_refused(tmp_path: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", 2, "echo {i}")
    out = tmp_path / "results.jsonl"
    first = ResultLog(out)
    first.open({})  # another batch is writing there now
    try:
        busy = cli(str(items), "--out", str(out), "--yes", cwd=tmp_path)
        assert busy.returncode == 2
        assert "another batch is writing to" in busy.stderr and "resumes" in busy.stderr
    finally:
        first.close()
    done = cli(str(items), "--out", str(out), "--yes", cwd=tmp_path)
    assert done.returncode == 0 and len(read_results(out)) == 2


def test_a_resumed_batch_reports_and_exits_by_what_its_results_file_holds(tmp_path: Path) -> None:
    items = write_items(tmp_path / "items.jsonl", 4, "exit $(( {i} == 1 ))")
    with items.open("a") as f:
        f.write(json.dumps({"id": "wipe", "language": "bash", "code": "rm -rf /"}) + "\n")
    first = cli(str(items), "--out", "r.jsonl", "--yes", "--json", cwd=tmp_path)
    assert first.returncode == 1, first.stderr
    # Everything is in the file: nothing runs, and the totals and the exit are the file's.
    again = cli(str(items), "--out", "r.jsonl", "--yes", "--json", cwd=tmp_path)
    assert again.returncode == 1, again.stderr
    assert "5 items · 1 failed · 1 blocked · 3 ok (5 already done)" in again.stderr
    report = json.loads(again.stdout)
    assert (report["ok"], report["failed"], report["blocked"], report["skipped"]) == (3, 1, 1, 5)
    assert report["this_run"] == dict.fromkeys(("ok", "failed", "timed_out", "blocked", "error"), 0)
    # Half of it anew: the failed item is fixed (a new digest, so it runs), the rest is kept.
    fixed = [json.loads(line) for line in items.read_text().splitlines()]
    fixed[1]["code"] = "exit 0"
    items.write_text("".join(json.dumps(item) + "\n" for item in fixed))
    third = cli(str(items), "--out", "r.jsonl", "--yes", "--json", cwd=tmp_path)
    report = json.loads(third.stdout)
    assert third.returncode == 1  # the blocked item is still in the file
    assert (report["ok"], report["failed"], report["blocked"], report["skipped"]) == (4, 0, 1, 4)
    assert report["this_run"]["ok"] == 1
    assert "5 items · 1 blocked · 4 ok (4 already done)" in third.stderr
    # Without the blocked item, every item the file holds passed: exit 0, also when resumed.
    clean = write_items(tmp_path / "clean.jsonl", 2, "echo {i}")
    assert cli(str(clean), "--out", "c.jsonl", "--yes", cwd=tmp_path).returncode == 0
    resumed = cli(str(clean), "--out", "c.jsonl", "--yes", cwd=tmp_path)
    assert resumed.returncode == 0 and "2 items · 2 ok (2 already done)" in resumed.stderr
