"""Whether the server runs in a container, and what there keeps bubblewrap out."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def in_container() -> bool:
    """True when this server runs in a container (Docker, Podman, a Kubernetes pod)."""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return True
    with contextlib.suppress(OSError):
        text = Path("/proc/1/cgroup").read_text()
        return any(word in text for word in ("docker", "kubepods", "containerd", "libpod"))
    return False


def container_blockers() -> list[str]:
    """What in this container keeps bubblewrap from making its namespaces, as seen here."""
    found = []
    with contextlib.suppress(OSError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Seccomp:") and line.split()[1] == "2":
                found.append(
                    "the server runs under a seccomp filter (the container runtime's profile), "
                    "which refuses new user namespaces"
                )
    with contextlib.suppress(OSError, IndexError):
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        masked = sorted(
            {f[4] for f in (line.split() for line in lines) if f[4].startswith("/proc/")}
        )
        if masked:
            found.append(
                f"/proc is masked ({', '.join(masked[:4])}{' ...' * (len(masked) > 4)} are "
                "covered), and bubblewrap cannot mount a /proc of its own over it"
            )
    return found


#: What lets a container's runs have the bubblewrap engine (its runtime refuses namespaces).
CONTAINER_FIX = (
    "this server runs in a container whose runtime refuses new namespaces (its seccomp "
    "profile) and masks /proc: give the pod a seccomp profile that allows user namespaces "
    "and securityContext procMount: Unmasked (Kubernetes), or run the container with "
    "--security-opt seccomp=unconfined --security-opt systempaths=unconfined (Docker)"
)
