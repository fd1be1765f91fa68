"""How a batch reaches a Dask cluster: over mutual TLS, or a loopback cluster of its own.

A Dask scheduler runs whatever Python a client sends it, on its workers, outside
any sandbox: whoever reaches it runs code as the workers' user. So a batch reaches
a cluster only over Dask's TLS with a certificate on both sides
(:meth:`ClusterAccess.security`), or starts a ``LocalCluster`` of its own that
listens on loopback only, with a throw-away certificate when ``cryptography`` is
installed (:func:`start_local_cluster`). A plain ``tcp://`` scheduler elsewhere is
refused with :class:`ClusterInsecure`.
"""

from __future__ import annotations

import contextlib
import importlib
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ClusterInsecure, InvalidRequest

#: The value of ``cluster`` that starts a Dask ``LocalCluster`` on this machine.
LOCAL_CLUSTER = "local"
#: The only scheme a batch reaches a scheduler it did not start with.
TLS_SCHEME = "tls"
#: Where a batch's own ``LocalCluster`` listens (scheduler, workers and nannies).
LOOPBACK_HOST = "127.0.0.1"
TLS_FIX = (
    "start the scheduler and the workers with Dask's --tls-ca-file, --tls-cert and --tls-key "
    "and reach it at its tls:// address with a certificate of the same authority "
    "(--tls-ca-file, --tls-cert, --tls-key, or Dask's distributed.comm.tls settings), "
    "or use --cluster local"
)


def distributed() -> Any:
    """The ``distributed`` module, untyped on purpose (its own hints are partial)."""
    return importlib.import_module("distributed")


@dataclass(frozen=True)
class ClusterAccess:
    """A batch's Dask cluster and the certificate this side presents to it.

    ``address`` is a ``tls://`` scheduler address or ``local``; the certificate
    files left out come from Dask's own configuration (``distributed.comm.tls.ca-file``,
    ``distributed.comm.tls.client.cert`` and ``.key``).
    """

    address: str
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None

    @property
    def local(self) -> bool:
        """True for a ``LocalCluster`` the batch starts itself."""
        return self.address == LOCAL_CLUSTER

    def check(self) -> None:
        """:class:`ClusterInsecure` unless the batch starts the cluster or uses ``tls://``."""
        scheme = self.address.split("://", 1)[0] if "://" in self.address else "tcp"
        if not self.local and scheme != TLS_SCHEME:
            raise ClusterInsecure(
                f"refusing the Dask scheduler at {self.address}: a {scheme}:// scheduler runs "
                "any code whoever reaches it sends (a network-on snippet included); " + TLS_FIX
            )

    def security(self) -> Any:
        """The ``distributed.Security`` of a scheduler this batch did not start: mutual
        TLS with encryption required, else :class:`ClusterInsecure` saying why and how."""
        self.check()
        given = {
            "tls_ca_file": self.tls_ca_file,
            "tls_client_cert": self.tls_cert,
            "tls_client_key": self.tls_key,
        }
        for name, path in given.items():
            if path is not None and not Path(path).is_file():
                raise InvalidRequest(f"the {name.replace('_', ' ')} {path!r} is not a file")
        security = distributed().Security(
            require_encryption=True, **{k: v for k, v in given.items() if v is not None}
        )
        if not security.tls_ca_file or not security.tls_client_cert:
            raise ClusterInsecure(
                f"the Dask scheduler at {self.address} needs a certificate authority and a "
                "client certificate for mutual TLS; " + TLS_FIX
            )
        return security


def cluster_access(cluster: str | ClusterAccess) -> ClusterAccess:
    """``cluster`` as a :class:`ClusterAccess` (a bare address: Dask's TLS settings)."""
    return cluster if isinstance(cluster, ClusterAccess) else ClusterAccess(cluster)


def cluster_option(
    cluster: str | None,
    tls_ca_file: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> ClusterAccess | None:
    """A face's cluster options as one :class:`ClusterAccess` (None: this machine)."""
    if not cluster:
        if tls_ca_file or tls_cert or tls_key:
            raise InvalidRequest("the TLS certificate options go with a tls:// cluster address")
        return None
    return ClusterAccess(cluster, tls_ca_file or None, tls_cert or None, tls_key or None)


def cluster_from_args(args: Any) -> ClusterAccess | None:
    """The cluster of a face's parsed ``--cluster`` and :func:`add_tls_options` options."""
    return cluster_option(args.cluster, args.tls_ca_file, args.tls_cert, args.tls_key)


def add_tls_options(parser: Any) -> None:
    """The certificate options of a face's argparse parser, named as Dask's own CLI names them."""
    parser.add_argument(
        "--tls-ca-file", metavar="PEM", help="the certificate authority of a tls:// cluster"
    )
    parser.add_argument(
        "--tls-cert", metavar="PEM", help="this side's certificate (signed by that authority)"
    )
    parser.add_argument(
        "--tls-key", metavar="PEM", help="its private key (when not in the --tls-cert file)"
    )


def temporary_security() -> Any | None:
    """A throw-away self-signed ``Security`` for a LocalCluster; None without ``cryptography``."""
    try:
        return distributed().Security.temporary()
    except ImportError:
        return None


async def start_local_cluster(workers: int) -> Any:
    """A ``LocalCluster`` of ``workers`` single-threaded processes, on loopback only."""
    security = temporary_security()
    return await distributed().LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host=LOOPBACK_HOST,
        dashboard_address=None,
        security=security,
        protocol="tls://" if security is not None else "tcp://",
        asynchronous=True,
    )


def address_host(address: str) -> str:
    """The host of a Dask address (``tls://10.0.0.5:8786`` -> ``10.0.0.5``)."""
    location = address.split("://", 1)[-1]
    if location.startswith("["):  # [IPv6]:port
        return location[1 : location.find("]")]
    return location.rsplit(":", 1)[0] if location.count(":") == 1 else location


def host_networks(addresses: Iterable[str | None]) -> list[str]:
    """The IPv4 ``/32`` networks of the hosts of ``addresses`` (names resolved)."""
    out: set[str] = set()
    for address in addresses:
        if not address:
            continue
        host = address_host(address)
        try:
            out.add(f"{ipaddress.IPv4Address(host)}/32")
            continue
        except ValueError:
            pass
        with contextlib.suppress(OSError):
            for *_, sockaddr in socket.getaddrinfo(host, None, socket.AF_INET):
                out.add(f"{sockaddr[0]}/32")
    return sorted(out)


def cluster_addresses(identity: dict[str, Any]) -> list[str]:
    """The scheduler's, every worker's and every nanny's address in a scheduler identity."""
    found = [identity.get("address")]
    for address, worker in identity.get("workers", {}).items():
        found += [address, worker.get("nanny")]
    return [a for a in found if isinstance(a, str) and a]
