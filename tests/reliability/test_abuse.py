"""The API under abuse: bounded work before any check, and a 400 with a code for bad input.

Each test makes the attack against a real server process and looks at the effect
from outside: the answer's status and ``code``, the server's RSS, and how long
``/status`` takes while the attack goes on.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import httpx

from tests.reliability.conftest import Live

#: What the server may grow by while it refuses hundreds of megabytes.
RSS_GROWTH_LIMIT_MB = 40
#: A /status answer slower than this while an attack runs means the event loop stalled.
STATUS_STALL_SEC = 2.0
HUGE = 500 * 1024 * 1024


def rss_mb(live: Live) -> float:
    for line in Path(f"/proc/{live.server.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _address(live: Live) -> tuple[str, int]:
    url = httpx.URL(live.server.url)
    return url.host, url.port or 80


def send_huge(
    live: Live, *, token: str | None, length: int = HUGE, chunked: bool = False
) -> tuple[bytes, int]:
    """POST a body of ``length`` bytes on a raw socket; the answer's head and what got sent.

    The body is pushed in 1 MB pieces until the server stops taking it.
    """
    headers = [
        "POST /api/sandbox/plan HTTP/1.1",
        f"Host: {_address(live)[0]}",
        "Content-Type: application/json",
        *([f"Authorization: token {token}"] if token else []),
        "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}",
    ]
    sock = socket.create_connection(_address(live), timeout=30)
    sent = 0
    piece = b" " * (1024 * 1024)
    try:
        sock.sendall(("\r\n".join(headers) + "\r\n\r\n").encode())
        sock.settimeout(0.05)
        answer = b""
        while sent < length:
            try:
                data = sock.recv(65536)
                if data:
                    answer += data
                    break
                break  # closed by the server
            except TimeoutError:
                pass
            try:
                sock.settimeout(5)
                frame = b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece
                sock.sendall(frame)
                sent += len(piece)
                sock.settimeout(0.05)
            except OSError:
                break
        sock.settimeout(10)
        try:
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                data = sock.recv(65536)
                if not data:
                    break
                answer += data
        except OSError:
            pass
        return answer, sent
    finally:
        sock.close()


def status_code_and_code(answer: bytes) -> tuple[int, str | None]:
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head.startswith(b"HTTP/") else 0
    try:
        code = json.loads(body.split(b"\r\n")[-1] if b"\r\n" in body else body)["code"]
    except (ValueError, KeyError):
        code = None
    return status, code


def measure_during(live: Live, attack: list[threading.Thread]) -> tuple[float, float]:
    """Run ``attack``; the worst /status latency and the RSS peak seen meanwhile."""
    worst, peak = 0.0, rss_mb(live)
    start = peak
    for thread in attack:
        thread.start()
    with live.server.client() as http:
        while any(t.is_alive() for t in attack):
            started = time.monotonic()
            assert http.get("/api/sandbox/status").status_code == 200
            worst = max(worst, time.monotonic() - started)
            peak = max(peak, rss_mb(live))
            time.sleep(0.05)
    for thread in attack:
        thread.join()
    print(
        f"during the attack: /status worst {worst * 1000:.0f} ms, RSS {start:.0f} -> {peak:.0f} MB"
    )
    return worst, peak


def test_unauthenticated_huge_bodies_are_refused_before_a_byte_is_read(live: Live) -> None:
    """Four 500 MB POSTs without a token: 403 at once, the body never buffered."""
    before = rss_mb(live)
    answers: list[tuple[bytes, int]] = []

    def attack() -> None:
        answers.append(send_huge(live, token=None))

    worst, peak = measure_during(live, [threading.Thread(target=attack) for _ in range(4)])
    assert len(answers) == 4
    for answer, sent in answers:
        assert status_code_and_code(answer)[0] == 403, answer[:200]
        assert sent < 64 * 1024 * 1024, f"the server took {sent >> 20} MB before refusing"
    assert peak - before < RSS_GROWTH_LIMIT_MB, f"RSS {before:.0f} -> {peak:.0f} MB"
    assert worst < STATUS_STALL_SEC, f"/status took {worst:.2f} s during the attack"


def test_authenticated_huge_bodies_get_a_400_before_buffering(live: Live) -> None:
    before = rss_mb(live)
    answers: list[tuple[bytes, int]] = []

    def attack(chunked: bool) -> None:
        answers.append(send_huge(live, token=live.server.token, chunked=chunked))

    threads = [threading.Thread(target=attack, args=(chunked,)) for chunked in (False, True)] * 1
    worst, peak = measure_during(live, threads)
    by_length, by_chunks = answers if answers[0][1] <= answers[1][1] else answers[::-1]
    assert status_code_and_code(by_length[0]) == (400, "body_too_large"), by_length[0][:300]
    assert by_length[1] < 64 * 1024 * 1024
    # A chunked body has no length to check: it is answered once it passes the limit.
    assert by_chunks[1] < 64 * 1024 * 1024, f"{by_chunks[1] >> 20} MB taken"
    assert peak - before < RSS_GROWTH_LIMIT_MB, f"RSS {before:.0f} -> {peak:.0f} MB"
    assert worst < STATUS_STALL_SEC, f"/status took {worst:.2f} s during the attack"


def test_a_3_gb_file_plan_is_refused_by_its_size_without_reading_it(live: Live) -> None:
    big = live.server.root_dir / "big.py"
    with open(big, "wb") as fh:
        fh.truncate(3 * 1024**3)  # sparse: 3 GB that costs no disk
    try:
        before = rss_mb(live)
        answer: list[httpx.Response] = []

        def attack() -> None:
            answer.append(live.http.post("/api/sandbox/plan", json={"file": "big.py"}))

        worst, peak = measure_during(live, [threading.Thread(target=attack)])
        assert answer[0].status_code == 400 and answer[0].json()["code"] == "invalid_file"
        assert "larger than 1000000 bytes" in answer[0].json()["message"]
        assert peak - before < RSS_GROWTH_LIMIT_MB, f"RSS {before:.0f} -> {peak:.0f} MB"
        assert worst < STATUS_STALL_SEC
    finally:
        big.unlink()


def test_symlink_loops_and_fifos_are_a_400_with_a_code(live: Live) -> None:
    root = live.server.root_dir
    (root / "loop1.py").symlink_to("loop2.py")
    (root / "loop2.py").symlink_to("loop1.py")
    os.mkfifo(root / "pipe.py")
    try:
        loop = live.http.post("/api/sandbox/plan", json={"file": "loop1.py"})
        assert (loop.status_code, loop.json()["code"]) == (400, "invalid_file"), loop.text
        assert "symlink loop" in loop.json()["message"]
        started = time.monotonic()
        fifo = live.http.post("/api/sandbox/plan", json={"file": "pipe.py"})
        assert (fifo.status_code, fifo.json()["code"]) == (400, "invalid_file"), fifo.text
        assert time.monotonic() - started < 5  # never opened for a blocking read
    finally:
        for name in ("loop1.py", "loop2.py", "pipe.py"):
            (root / name).unlink()


def test_lone_surrogates_are_a_400_with_a_code(live: Live) -> None:
    """``"\\ud800"`` is valid JSON but no character: refused at the door, never a 500."""
    for method, path, raw in (
        ("POST", "/api/sandbox/plan", b'{"language": "python", "code": "print(1) # \\ud800"}'),
        ("POST", "/api/sandbox/plan", b'{"language": "python", "code": "1", "stdin": "\\udfff"}'),
        ("POST", "/api/sandbox/run", b'{"language": "python", "code": "\\ud800"}'),
        ("POST", "/api/sandbox/approve", b'{"plan_id": "plan_\\ud800"}'),
        ("PUT", "/api/sandbox/config", b'{"matrixlab_image": "\\ud800"}'),
        ("POST", "/api/sandbox/matrixlab/test", b'{"matrixlab_url": "http://\\ud800"}'),
    ):
        answer = live.http.request(
            method, path, content=raw, headers={"Content-Type": "application/json"}
        )
        assert (answer.status_code, answer.json()["code"]) == (400, "invalid_unicode"), (
            path,
            answer.text,
        )
