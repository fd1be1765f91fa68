"""The Docker engine API, as the MatrixLab Runner stand-in uses it to run a step as a
real container (``--docker-image``, :mod:`tests.support.standin_runs`): one call, and a
container's output until it exits. Standard library only, like the stand-in (it runs in
the stand-in's own image too).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import time
from typing import Any

#: Where the engine listens, as the real Runner expects it (``DOCKER_HOST`` may say otherwise).
DOCKER_SOCKET = "/var/run/docker.sock"


def docker_socket() -> str:
    """The engine's unix socket: ``DOCKER_HOST``'s, if it names one, else :data:`DOCKER_SOCKET`."""
    host = os.environ.get("DOCKER_HOST", "")
    return host[len("unix://") :] if host.startswith("unix://") else DOCKER_SOCKET


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP to the Docker engine's unix socket."""

    def __init__(self, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(docker_socket())


def docker(
    method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 120
) -> tuple[int, bytes]:
    """One call of the Docker engine API: (status, body)."""
    connection = UnixHTTPConnection(timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def attach(cid: str, timeout: float) -> tuple[bytes, bytes, bool]:
    """A container's stdout and stderr until it exits, or ``timeout``: (out, err, timed out)."""
    connection = UnixHTTPConnection(timeout)
    streams = {1: bytearray(), 2: bytearray()}
    deadline = time.monotonic() + timeout
    try:
        connection.request("POST", f"/containers/{cid}/attach?logs=1&stream=1&stdout=1&stderr=1")
        sock = connection.sock  # the response takes it over (a close-delimited stream)
        assert sock is not None
        response = connection.getresponse()
        while True:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            header = response.read(8)
            if len(header) < 8:
                return bytes(streams[1]), bytes(streams[2]), False
            size = int.from_bytes(header[4:8], "big")
            streams.get(header[0], streams[1]).extend(response.read(size))
    except TimeoutError:
        return bytes(streams[1]), bytes(streams[2]), True
    except (ConnectionError, http.client.HTTPException):
        return bytes(streams[1]), bytes(streams[2]), False  # removed under us
    finally:
        connection.close()
