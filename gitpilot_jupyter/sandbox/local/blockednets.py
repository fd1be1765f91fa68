"""The networks a network-on run with egress must not reach (:func:`blocked_networks`).

Around every host: :data:`AROUND_RANGES`; of this one: its addresses, routes and gateway,
looked up anew for each run; and what a backend serving others adds (:func:`block_also`).
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
from collections.abc import Iterable
from pathlib import Path

#: The networks around a host that egress to the world must not reach whatever the host
#: looks like: private and shared ranges (a LAN, a container's or a pod's host, the other
#: pods, a Dask scheduler on another machine) and link-local (cloud metadata).
AROUND_RANGES = ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16")


#: Networks this process's network-on runs must not reach besides those around the host:
#: what a backend serving others adds (a batch worker: its Dask cluster's machines).
_ALSO_BLOCKED: set[str] = set()


def block_also(networks: Iterable[str]) -> None:
    """Keep every later network-on run of this process from ``networks`` too (IPv4 CIDRs;
    the egress-only network has no IPv6 route, and no way to the host's loopback)."""
    for network in networks:
        net = ipaddress.ip_network(network, strict=False)
        if isinstance(net, ipaddress.IPv4Network) and not net.is_loopback:
            _ALSO_BLOCKED.add(str(net))


def blocked_networks() -> list[str]:
    """What a network-on run must not reach: :data:`AROUND_RANGES`, every address of this
    host, the subnet of every route it has but the default one (bridges and links of any
    name: containers, VMs), the default gateway itself, and what :func:`block_also` added."""
    out = set(AROUND_RANGES) | _ALSO_BLOCKED
    with contextlib.suppress(OSError):
        lines = Path("/proc/net/fib_trie").read_text().splitlines()
        for before, line in itertools.pairwise(lines):
            if "/32 host LOCAL" in line and "--" in before:
                address = before.split()[-1]
                if not address.startswith("127."):
                    out.add(f"{address}/32")
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/net/route").read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) <= 7 or fields[0] == "lo":
                continue
            net = ipaddress.IPv4Address(int(fields[1], 16).to_bytes(4, "little"))
            mask = bin(int(fields[7], 16)).count("1")
            if mask:
                out.add(str(ipaddress.IPv4Network(f"{net}/{mask}", strict=False)))
            gateway = int(fields[2], 16)
            if gateway:
                out.add(f"{ipaddress.IPv4Address(gateway.to_bytes(4, 'little'))}/32")
    return sorted(out)
