"""Network off means no TCP connection at all, even to loopback; network on means it works."""

from __future__ import annotations

import pytest

from gitpilot_jupyter.sandbox.errors import ContainmentUnavailable

from .conftest import MECHANISMS, make_backend, run

CONNECT = """
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
    print("connected")
except OSError as exc:
    print("refused", exc)
"""


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_network_off_cannot_reach_a_loopback_server(mechanism: str, listener: int) -> None:
    backend = make_backend(mechanism)
    result = run(backend, CONNECT.format(port=listener))
    assert result.exit_code == 0, result.stderr
    if mechanism == "none":
        # No namespace: the layer is not claimed, and indeed the connection works.
        assert "netns" not in result.isolation
        assert result.stdout.startswith("connected")
    elif mechanism == "landlock":
        # No namespace, but no socket either (seccomp) and no TCP connect (Landlock).
        assert "net-denied" in result.isolation and "netns" not in result.isolation
        assert result.stdout.startswith("refused"), result.stdout
    else:
        assert "netns" in result.isolation
        assert result.stdout.startswith("refused"), result.stdout


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_network_on_reaches_the_host_loopback_only_without_egress_only(
    mechanism: str, listener: int
) -> None:
    backend = make_backend(mechanism)
    if backend.refusal(allow_network=True) is not None:
        # No network of its own here: refused, unless the administrator accepted it.
        with pytest.raises(ContainmentUnavailable) as refused:
            run(backend, CONNECT.format(port=listener), allow_network=True)
        assert refused.value.code == "network_unavailable", refused.value
        backend = make_backend(mechanism, allow_uncontained=True)
    result = run(backend, CONNECT.format(port=listener), allow_network=True)
    assert result.exit_code == 0, result.stderr
    assert "netns" not in result.isolation
    if backend.isolator.refusal(allow_network=True) is not None:
        assert "host-network" in result.isolation or "uncontained" in result.isolation
    if "egress-only" in result.isolation:
        # bwrap with user-mode networking: a stack of its own, the host's loopback not in it.
        assert result.stdout.startswith("refused"), result.stdout
    else:
        assert mechanism != "bwrap" or "egress-only" in {
            u["layer"] for u in backend.isolator.report()["unavailable"]
        }
        assert result.stdout.startswith("connected"), result.stdout
