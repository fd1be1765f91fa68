"""The bootstrap of a session's kernel: the code of its run, inside the sandbox.

Stdlib only until ipykernel. :func:`.boot.boot_code` puts ``CONNECTION`` (ZMQ ``ipc``
sockets in the run folder, the session's key) and ``NO_KERNEL_MARK`` in front of this
file. The kernel is the interpreter's own environment's ipykernel; without one the
bootstrap ends with exit code 3 and one line that starts with the mark.

A display larger than ``MAX_DISPLAY_BYTES`` (the session's ``max_display_item_mb``)
is sent as its size only (``TOO_BIG_KEY``): the server drops it with its note, where
a message past its socket's limit would be lost with the messages after it. (This is
no defence, the cell's code may undo it: the server checks every message itself.)
"""

import json
import os
import sys
from typing import Any

DISPLAYS = ("display_data", "execute_result")


def _size(data: dict[Any, Any]) -> int:
    """At least the bytes of ``data`` as JSON (without copying a large string)."""
    return sum(
        len(str(key)) + (len(value) if isinstance(value, str) else len(json.dumps(value)))
        for key, value in data.items()
    )


def guard_displays(session: Any, limit: int, key: str) -> None:
    """Make ``session.send`` send a display past ``limit`` bytes as its size only."""
    send = session.send

    def guarded(stream: Any, msg_or_type: Any, content: Any = None, *args: Any, **kw: Any) -> Any:
        msg = msg_or_type if isinstance(msg_or_type, dict) else None
        kind = msg.get("msg_type") if msg is not None else msg_or_type
        body = msg.get("content") if msg is not None else content
        if kind in DISPLAYS and isinstance(body, dict) and isinstance(body.get("data"), dict):
            size = _size(body["data"])
            if size > limit:
                body = {**body, "data": {}, "metadata": {}, key: size}
                if msg is not None:
                    msg_or_type = {**msg, "content": body}
                else:
                    content = body
        return send(stream, msg_or_type, content, *args, **kw)

    session.send = guarded


def main() -> None:
    """Write the connection file (0600, in the run folder) and serve the kernel on it."""
    connection, mark = globals()["CONNECTION"], globals()["NO_KERNEL_MARK"]
    try:
        from ipykernel.kernelapp import IPKernelApp
    except ImportError as exc:
        sys.stderr.write(f"{mark} {exc}\n")
        sys.exit(3)
    path = os.path.join(os.getcwd(), connection.pop("file"))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump(connection, file)
    # No history database: a session's state is its namespace, not a file of its past.
    app = IPKernelApp.instance()
    app.initialize(argv=["-f", path, "--HistoryManager.enabled=False"])  # type: ignore[no-untyped-call]
    guard_displays(app.session, globals()["MAX_DISPLAY_BYTES"], globals()["TOO_BIG_KEY"])
    app.start()  # type: ignore[no-untyped-call]


main()
