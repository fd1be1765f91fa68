"""What the host-shape suite does *inside* a shape, as the user: stdlib only, any Python 3.

In the local shapes it runs as a plain script; in the pod it is copied into the
container and run with ``docker exec``, so both shapes are driven the same way.

    inside.py api METHOD PATH [JSON]   the API on BASE_URL with TOKEN (env); prints {code, body}
    inside.py plant PATH TEXT          writes TEXT to PATH (0600, parents 0700)
    inside.py exists PATH              prints true/false
    inside.py read PATH                prints the file's text (null when it cannot be read)
    inside.py holds FOLDER TEXT        prints whether a file in FOLDER contains TEXT
    inside.py connect FAMILY ADDRESS   prints whether AF_INET HOST:PORT or AF_UNIX PATH connects
    inside.py kill TEXT                kills the processes whose command line holds TEXT (a nonce)
    inside.py procs                    prints every process's command line (JSON list of strings)
    inside.py listen SOCKET            a loopback TCP and a unix listener (see :func:`listen`)
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import urllib.error
import urllib.request
from typing import Any


def api(base: str, token: str, method: str, path: str, body: Any = None) -> dict[str, Any]:
    """One REST call with the server's token; the status code and the parsed body."""
    request = urllib.request.Request(
        base.rstrip("/") + "/" + path.lstrip("/"),
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            code, text = answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        code, text = error.code, error.read().decode()
    try:
        parsed: Any = json.loads(text) if text else None
    except ValueError:
        parsed = text
    return {"code": code, "body": parsed}


def plant(path: str, text: str) -> None:
    """Write a secret as its owner would keep it."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(text)


def procs() -> list[str]:
    """The command line of every process this user can see."""
    lines = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as handle:
                    lines.append(handle.read().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return lines


def read(path: str) -> str | None:
    """The text of ``path`` as the user reads it, None when the user cannot."""
    try:
        with open(path, errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def holds(folder: str, text: str) -> bool:
    """True when a file in ``folder`` contains ``text`` (the token file is there)."""
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        try:
            with open(os.path.join(folder, name), errors="replace") as handle:
                if text in handle.read():
                    return True
        except OSError:
            continue
    return False


def kill(text: str) -> None:
    """SIGKILL each process whose command line holds ``text`` (a nonce: only the test's)."""
    for pid in os.listdir("/proc"):
        if pid == str(os.getpid()):
            continue  # its own command line holds the nonce too
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if text.encode() in handle.read():
                    os.kill(int(pid), 9)
        except (OSError, ValueError):
            continue


def connect(family: str, address: str) -> bool:
    """True when a connection to ``address`` (``HOST:PORT`` or a socket path) succeeds."""
    try:
        with socket.socket(getattr(socket, family)) as sock:
            sock.settimeout(5)
            host, _, port = address.rpartition(":")
            sock.connect((host, int(port)) if family == "AF_INET" else address)
    except OSError:
        return False
    return True


def listen(unix_path: str) -> None:
    """Listen on 127.0.0.1 (any port) and on ``unix_path``; report each connection.

    Prints ``{"port": N}`` first, then one line per accepted connection
    (``tcp`` or ``unix``), and exits when its stdin closes.
    """
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    if os.path.exists(unix_path):
        os.unlink(unix_path)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    os.chmod(unix_path, 0o666)  # as docker.sock is to its group: the user may connect
    unix.listen(8)

    def serve(server: socket.socket, kind: str) -> None:
        while True:
            try:
                peer, _ = server.accept()
            except OSError:
                return
            print(kind, flush=True)
            peer.close()

    for server, kind in ((tcp, "tcp"), (unix, "unix")):
        threading.Thread(target=serve, args=(server, kind), daemon=True).start()
    print(json.dumps({"port": tcp.getsockname()[1]}), flush=True)
    sys.stdin.read()


def main(argv: list[str]) -> int:
    """Dispatch one command; see the module docstring."""
    command, args = argv[0], argv[1:]
    if command == "api":
        body = json.loads(args[2]) if len(args) > 2 else None
        print(json.dumps(api(os.environ["BASE_URL"], os.environ["TOKEN"], args[0], args[1], body)))
    elif command == "plant":
        plant(args[0], args[1])
    elif command == "exists":
        print(json.dumps(os.path.lexists(args[0])))
    elif command == "read":
        print(json.dumps(read(args[0])))
    elif command == "holds":
        print(json.dumps(holds(args[0], args[1])))
    elif command == "connect":
        print(json.dumps(connect(args[0], args[1])))
    elif command == "kill":
        kill(args[0])
    elif command == "procs":
        print(json.dumps(procs()))
    elif command == "listen":
        listen(args[0])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
