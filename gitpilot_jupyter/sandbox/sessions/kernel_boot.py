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

import contextlib
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


def own_packages(folder: str, network: bool) -> None:
    """Make ``folder`` the session's packages folder: ``pip install`` (``%pip``, ``!pip``,
    ``python -m pip`` in a subprocess) installs there (``PIP_TARGET``), the kernel and its
    subprocesses import from it (``sys.path``, ``PYTHONPATH``). With the network off, pip
    asks no index (``PIP_NO_INDEX``: it fails at once instead of retrying), and ``%pip``
    says why and how to ask for network first."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.environ["PIP_TARGET"] = folder
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = folder + (os.pathsep + path if path else "")
    os.environ["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if not network:
        os.environ["PIP_NO_INDEX"] = "1"
    import site

    site.addsitedir(folder)  # (its .pth files too)


def offline_pip(shell: Any, note: str) -> None:
    """Make ``%pip`` say ``note`` (why pip reaches no index, and the fix) before it runs."""
    magics = shell.magics_manager.magics["line"]
    pip = magics.get("pip")
    if pip is None:
        return

    def noted(line: str) -> Any:
        if "install" in line.split():
            sys.stderr.write(note + "\n")
        return pip(line)

    shell.register_magic_function(noted, "line", "pip")


def link_inputs(folder: str, names: list[str]) -> None:
    """Make each of ``names`` in the session's folder a link to its verified copy in
    ``folder`` (read-only: bound so), replacing a file or link of that name (an earlier
    cell's input included). A folder of that name is left alone: the cell is refused."""
    home = os.getcwd()
    for name in names:
        link = os.path.join(home, name)
        if os.path.isdir(link) and not os.path.islink(link):
            raise IsADirectoryError(
                f"the session's folder has a folder {name!r}: the input cannot take its "
                "name (remove or rename that folder in a cell first)"
            )
        temporary = os.path.join(home, f".{name}.gitpilot-link")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        os.symlink(os.path.join(folder, name), temporary)
        os.replace(temporary, link)


def own_helper(module: str) -> None:
    """Leave the helper the server calls before a cell with inputs in ``sys.modules``."""
    import types

    helper = types.ModuleType(module, "gitpilot sandbox: the session's own helpers")
    helper.link_inputs = link_inputs  # type: ignore[attr-defined]
    sys.modules[module] = helper


def open_to_server(folder: str, sockets: list[str]) -> None:
    """Let the server reach the sockets when it is not root: search (not list) on each
    folder of the kernel's on their way, read and write on the sockets themselves.

    A server that is not root is no uid of the sandbox's (it owns the user namespace
    its runs' ids are mapped in), and the run's folders are its uid's alone (0700).
    Nothing else can name the sockets: the folders exist only in this sandbox's mount
    namespace, which only the server and the session's own processes may enter
    (``/proc/PID/root``: another run or session is another uid, in a namespace of its own).
    """
    uid, path = os.getuid(), folder
    while True:
        try:
            info = os.stat(path)
            if info.st_uid == uid and not info.st_mode & 0o001:
                os.chmod(path, (info.st_mode & 0o7777) | 0o001)
        except OSError:
            pass  # (a folder of another's: the sandbox's own, searchable)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for socket in sockets:
        # (The heartbeat's is bound by its thread, maybe not yet: the server does not use it.)
        with contextlib.suppress(FileNotFoundError):
            os.chmod(socket, 0o666)


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
    network = globals()["NETWORK"]
    own_helper(globals()["HELPER_MODULE"])
    own_packages(os.path.join(os.getcwd(), globals()["PACKAGES_DIR"]), network)
    # No history database: a session's state is its namespace, not a file of its past.
    app = IPKernelApp.instance()
    app.initialize(argv=["-f", path, "--HistoryManager.enabled=False"])  # type: ignore[no-untyped-call]
    guard_displays(app.session, globals()["MAX_DISPLAY_BYTES"], globals()["TOO_BIG_KEY"])
    if not network:
        offline_pip(app.shell, globals()["PIP_OFFLINE_NOTE"])
    # Bound now (initialize): the server's poll sees the control socket once it may use it.
    ports = [connection[key] for key in connection if key.endswith("_port")]
    prefix = os.path.join(os.getcwd(), connection["ip"])
    open_to_server(os.getcwd(), [f"{prefix}-{port}" for port in ports])
    app.start()  # type: ignore[no-untyped-call]


main()
