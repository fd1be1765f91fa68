"""What a session's run is: the kernel's connection, its bootstrap, and the refusals.

The kernel listens on ZMQ ``ipc`` sockets (Unix sockets, no network) in its own run
folder, which exists only in its sandbox's mount namespace (bubblewrap's private,
size-capped stage): no other run, session or user can name them. The server reaches
them through ``/proc/PID/root`` of the kernel's process, which only the server (the
owner of the sandbox's user namespace) may enter; a server that is not root is no uid
of the sandbox's, so the kernel gives search on its folders and read-write on its
sockets (:func:`.kernel_boot.open_to_server`). Each session has a key of its own.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import SessionUnavailable

#: The kernel's sockets are ``<folder>/.kernel-<n>``; its connection file in the folder.
SOCKET_PREFIX = ".kernel"
CONNECTION_FILE = ".kernel.json"
#: The channels' numbers (with ``ipc`` a port is the socket's suffix).
PORTS = {"shell_port": 1, "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5}
#: The engines whose runs have a run folder no other run can see (a mount namespace of
#: their own): the only ones a session's sockets are kept shut on.
SESSION_ENGINES = ("bwrap",)
#: The folder of the session's own packages, in its run folder: ``pip install`` in a cell
#: (``%pip``, ``!pip``, a subprocess) lands there, the kernel imports from it, and it goes
#: with the session. (Not ``PYTHONUSERBASE``: pip refuses ``--user`` in a venv.)
PACKAGES_DIR = ".packages"
#: The folder, in the session's folder, where each cell's verified input copies are seen
#: (read-only: the server's folder of them, bound when the session starts); a cell's
#: inputs are then linked at ``./NAME`` (:data:`HELPER_MODULE`).
INBOX_DIR = ".inbox"
#: The names of the session's folder an input may not take (besides a run's own).
RESERVED_NAMES = (INBOX_DIR, PACKAGES_DIR, CONNECTION_FILE)
#: The module the bootstrap leaves in the kernel's ``sys.modules`` with the helper the
#: server calls before a cell with inputs (``link_inputs``).
HELPER_MODULE = "_gitpilot_session"
#: What ``%pip install`` says in a session whose network is off.
PIP_OFFLINE_NOTE = (
    "note: this session's network is off, so pip reaches no package index (a wheel or "
    "folder in the session's own folder still installs). To install from an index, stop "
    "the session (%sandbox session stop NAME) and start it again with network on: a "
    "`%%sandbox --session NAME --network` cell (REST: allow_network in POST "
    "/api/sandbox/sessions); the plan then says the network is on."
)
#: The first words of the line a bootstrap without ipykernel writes.
NO_KERNEL_MARK = "gitpilot-session: no ipykernel:"
#: The content key of a display the kernel did not send, past the cap: its size only.
TOO_BIG_KEY = "gitpilot_display_size"
_BOOT = Path(__file__).with_name("kernel_boot.py")


@cache
def _boot_source() -> str:
    return _BOOT.read_text(encoding="utf-8")


@dataclass(frozen=True)
class Connection:
    """A session's kernel connection: the key, and where its sockets are."""

    key: str

    def for_kernel(self) -> dict[str, Any]:
        """The connection file the kernel reads (its sockets relative to its folder)."""
        return {
            "transport": "ipc",
            "ip": SOCKET_PREFIX,
            "key": self.key,
            "signature_scheme": "hmac-sha256",
            "kernel_name": "python3",
            **PORTS,
        }

    def for_server(self, pid: int, workdir: Path) -> dict[str, Any]:
        """The same connection seen from the server: the sockets in the kernel's own
        file-system view, ``/proc/PID/root`` + its run folder."""
        info = self.for_kernel()
        info["ip"] = os.path.join(f"/proc/{pid}/root", str(workdir).lstrip("/"), SOCKET_PREFIX)
        return info

    def socket(self, pid: int, workdir: Path, channel: str) -> str:
        """The host path of one channel's socket (``shell_port``, ...)."""
        return f"{self.for_server(pid, workdir)['ip']}-{PORTS[channel]}"


def new_connection() -> Connection:
    """A fresh connection: a key no other session has (256 bits)."""
    return Connection(key=secrets.token_hex(32))


def boot_code(connection: Connection, max_display_bytes: int, *, network: bool) -> str:
    """The session run's code: the connection, the display cap (one display's bytes),
    the session's network and its packages folder in front of :mod:`.kernel_boot`."""
    info = {**connection.for_kernel(), "file": CONNECTION_FILE}
    # Strings, numbers and booleans only: their repr is a Python literal.
    return (
        f"CONNECTION = {info!r}\nNO_KERNEL_MARK = {NO_KERNEL_MARK!r}\n"
        f"MAX_DISPLAY_BYTES = {max_display_bytes!r}\nTOO_BIG_KEY = {TOO_BIG_KEY!r}\n"
        f"NETWORK = {network!r}\nPACKAGES_DIR = {PACKAGES_DIR!r}\n"
        f"PIP_OFFLINE_NOTE = {PIP_OFFLINE_NOTE!r}\nHELPER_MODULE = {HELPER_MODULE!r}\n"
        f"{_boot_source()}"
    )


def link_code(folder: str, names: list[str]) -> str:
    """The code the server runs (silently) before a cell with inputs: link each of
    ``names`` at ``./NAME`` to its verified copy in ``folder`` (below :data:`INBOX_DIR`).
    Strings only: their repr is a Python literal."""
    return f"__import__({HELPER_MODULE!r}).link_inputs({folder!r}, {names!r})"


def engine_refusal(engine: str) -> SessionUnavailable | None:
    """Why sessions cannot be started on ``engine`` (None: they can)."""
    if engine in SESSION_ENGINES:
        return None
    return SessionUnavailable(
        f"sessions need the bwrap engine (this host's runs use {engine!r}): a session's "
        "kernel sockets are kept shut by a mount namespace of its own, which the "
        "namespace-free engine has not. To fix: install bubblewrap where user namespaces "
        "are allowed, and leave GITPILOT_SANDBOX_ISOLATION unset (or auto)"
    )


def no_kernel(interpreter: str, detail: str) -> SessionUnavailable:
    """The refusal of a session whose interpreter's environment has no ipykernel."""
    return SessionUnavailable(
        f"the interpreter {interpreter} has no ipykernel ({detail.strip()}): a session "
        f"runs an IPython kernel from the interpreter's own environment. To fix: "
        f"{interpreter} -m pip install ipykernel",
        code="ipykernel_missing",
    )
