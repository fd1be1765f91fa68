"""The bootstrap of a session's kernel: the code of its run, inside the sandbox.

Stdlib only until ipykernel. :func:`.boot.boot_code` puts ``CONNECTION`` (ZMQ ``ipc``
sockets in the run folder, the session's key) and ``NO_KERNEL_MARK`` in front of this
file. The kernel is the interpreter's own environment's ipykernel; without one the
bootstrap ends with exit code 3 and one line that starts with the mark.
"""

import json
import os
import sys


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
    IPKernelApp.launch_instance(argv=["-f", path, "--HistoryManager.enabled=False"])


main()
