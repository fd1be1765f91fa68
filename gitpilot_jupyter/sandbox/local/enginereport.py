"""Which engine a run gets on this host, and what it cannot give a run there.

:func:`choose_engine` picks the strongest engine allowed (bwrap, else the namespace-free
one, else ``unshare``); :func:`refusal` says why a run cannot be contained, :func:`gaps`
what the engine in force leaves open, and :func:`report` every missing layer with its
reason and fix. :class:`.LayeredIsolator` asks these with what it found.
"""

from __future__ import annotations

import os
import pwd
import sys
from collections.abc import Callable
from typing import cast

from ..records import IsolationGap, IsolationReport
from . import cgroups, confine, namespaces, nsfree
from .bundled import is_bundled
from .containers import CONTAINER_FIX, container_blockers, in_container
from .isolation import CONTAINED_ENGINES, ISOLATION_ENV, UNCONTAINED_FIX
from .rlimits import unavailable_reasons

#: True on Linux, the one platform with the namespaces and cgroups the engines use.
LINUX = sys.platform == "linux"
#: What the engine in force is: bubblewrap's or unshare's namespaces, or the namespace-free one.
Engine = namespaces.Namespaces | nsfree.Engine
#: The cgroup tree runs get now and why it lacks what it lacks (the isolator's, asked when needed).
CgroupsNow = Callable[[], tuple[cgroups.CgroupTree | None, list[dict[str, str]]]]


def cgroup_fix() -> str:
    """How to give a server that is not root its run cgroups."""
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        user = str(os.geteuid())
    name = f"gitpilot-{user}"
    return (
        "run the server in a cgroup delegated to its user (cgroup v2: systemd-run --user "
        "--scope -p Delegate=yes jupyter lab); on cgroup v1, as root: mkdir "
        f"/sys/fs/cgroup/memory/{name} /sys/fs/cgroup/pids/{name} and chown {user} both, then "
        f"start the server with {cgroups.CGROUP_ENV}=/{name} (or c.SandboxApp.cgroup_parent); "
        "or run the server as root"
    )


def choose_engine(choice: str) -> tuple[Engine | None, list[dict[str, str]]]:
    """The engine to use now for ``choice`` (see :class:`.LayeredIsolator`), strongest
    first, and why stronger ones are not used."""
    if not LINUX:
        return None, [
            {
                "layer": "namespaces",
                "reason": f"{sys.platform} has no Linux namespaces",
                "fix": "use the matrixlab backend (Docker) for strong isolation",
            }
        ]
    if choice == "none":
        return None, [disabled("namespaces", "none")]
    missing: list[dict[str, str]] = []
    for kind in ("bwrap", "landlock", "unshare"):
        if choice not in ("auto", kind):
            if kind == "bwrap":
                missing.append(disabled("bwrap", choice))
            continue
        if kind == "landlock":
            engine, gap = nsfree.detect()
            if engine is not None:
                return engine, missing
            assert gap is not None
            missing.append(_plain(gap))
            continue
        tool, why = namespaces.detect(kind)
        if tool is not None:
            return tool, missing
        assert why is not None
        missing.append(why)
    return None, missing


def refusal(
    engine: Engine | None, missing: list[dict[str, str]], *, allow_network: bool = False
) -> IsolationGap | None:
    """Why a run (network on: ``allow_network``) cannot be contained by ``engine``, or None
    (``missing``: why no stronger engine is used)."""
    kind = engine.kind if engine is not None else "none"
    if kind not in CONTAINED_ENGINES:
        return _uncontained(kind, missing)
    if allow_network:
        if isinstance(engine, nsfree.Engine):
            return {
                "layer": "egress-only",
                "reason": "the namespace-free engine (this host allows no namespaces) "
                "cannot give a network-on run a network of its own: it would share the "
                "host's network, its loopback and the Jupyter API",
                "fix": "run without network, or use the matrixlab backend",
            }
        if isinstance(engine, namespaces.Namespaces) and engine.egress_error is not None:
            return {
                "layer": "egress-only",
                "reason": "a network-on run would share the host's network (its loopback, "
                f"the Jupyter API, its services): {engine.egress_error}",
                "fix": confine.NET_FIX,
            }
    return None


def gaps(engine: Engine | None, cgroups_now: CgroupsNow) -> list[IsolationGap]:
    """What ``engine`` cannot keep from a run, and memory left uncapped (the cgroup tree
    and why it lacks controllers: ``cgroups_now()``)."""
    out: list[IsolationGap] = []
    if isinstance(engine, nsfree.Engine):
        out += nsfree.gaps(as_root=os.geteuid() == 0)
    elif (
        isinstance(engine, namespaces.Namespaces)
        and engine.confine is not None
        and not engine.confine.drops  # runs keep the server's uid
    ):
        out.append(cast(IsolationGap, confine.own_uid_gap(engine.confine)))
    tree, cg_missing = cgroups_now()
    memory = tree is not None and tree.memory_parent is not None
    if not memory:
        why = next((g for g in cg_missing if g["layer"] == "cgroup-memory"), None)
        out.append(
            {
                "layer": "cgroup-memory",
                "reason": "memory is not capped for the run as a whole (no memory cgroup): "
                "each process may take up to the limit, so several together exceed it",
                "fix": why["fix"] if why is not None else cgroup_fix(),
            }
        )
    return out


def report(
    engine: Engine | None,
    missing: list[dict[str, str]],
    cgroups_now: CgroupsNow,
    *,
    refusal_of: Callable[..., IsolationGap | None],
    layers: Callable[[], list[str]],
    choice: str,
    choice_error: str | None,
) -> IsolationReport:
    """Layers in force, the mechanism, and each missing layer with its reason and fix.

    Of :meth:`.LayeredIsolator.report`: its ``engine`` and why no stronger one
    (``missing``), its cgroups, :meth:`~.LayeredIsolator.refusal` (``refusal_of``),
    :meth:`~.LayeredIsolator.layers` and configured ``choice``.
    """
    tool = engine if isinstance(engine, namespaces.Namespaces) else None
    tree, cg_missing = cgroups_now()
    covered = tree.layers() if tree is not None else []
    missing += cg_missing
    refused_here = [g for g in missing if "cannot create namespaces" in g["reason"]]
    if refused_here and in_container():
        # The user's sysctl fix cannot help inside: name what blocks and what exists.
        blockers = container_blockers()
        for gap in refused_here:
            if blockers:
                gap["reason"] += "; in this container: " + "; ".join(blockers)
            gap["fix"] = f"{CONTAINER_FIX}; or use the matrixlab backend"
    missing += unavailable_reasons(
        memory="cgroup-memory" not in covered,
        processes="cgroup-pids" not in covered and not own_uids(engine),  # NPROC holds
    )
    if tool is not None and tool.kind == "bwrap":
        missing += confine.unavailable(tool.confine, tool.egress_error)
        if is_bundled(tool.path):
            missing.append(
                {
                    "layer": "system-bwrap",
                    "reason": "no bubblewrap is installed: runs use the bundled build "
                    f"({tool.path}, pinned by its SHA-256), which gets no security updates "
                    "from your distribution",
                    "fix": namespaces.BWRAP_FIX,
                }
            )
    if isinstance(engine, nsfree.Engine):
        missing += [_plain(g) for g in nsfree.gaps(as_root=os.geteuid() == 0)]
    refusal = refusal_of()
    if refusal is not None:
        missing.insert(0, _plain(refusal))
    elif isinstance(engine, nsfree.Engine):
        network = refusal_of(allow_network=True)
        if network is not None:
            missing.append(_plain(network))
    if (
        LINUX
        and os.geteuid() == 0
        and (tool is None or tool.kind != "bwrap")
        and not (isinstance(engine, nsfree.Engine))
    ):
        missing.append(
            {
                "layer": "root-containment",
                "reason": "the server runs as root without bubblewrap: a snippet runs as "
                "root with every capability, and could leave its cgroup or change the host",
                "fix": namespaces.BWRAP_FIX,
            }
        )
    if choice_error:
        missing.insert(
            0,
            {
                "layer": "config",
                "reason": choice_error,
                "fix": f"set {ISOLATION_ENV} to auto, bwrap, unshare or none",
            },
        )
    return {
        "layers": layers(),
        "engine": engine.kind if engine is not None else "none",
        "namespaces": tool.kind if tool is not None else "none",
        "cgroups": f"v{tree.version}" if tree is not None else "none",
        "choice": choice,
        "unavailable": cast(list[IsolationGap], missing),
    }


def own_uids(engine: Engine | None) -> bool:
    """True when each run of ``engine`` has a host uid of its own (see ``own-uid``)."""
    if isinstance(engine, nsfree.Engine):
        return os.geteuid() == 0
    return engine is not None and engine.confine is not None and engine.confine.drops


def _plain(gap: IsolationGap) -> dict[str, str]:
    return {"layer": gap["layer"], "reason": gap["reason"], "fix": gap["fix"]}


def _uncontained(kind: str, missing: list[dict[str, str]]) -> IsolationGap:
    """The refusal of a host with no engine that walls a snippet off the user's files."""
    why = "; ".join(f"{m['layer']}: {m['reason']}" for m in missing) or "none configured"
    refused = any("cannot create namespaces" in m["reason"] for m in missing)
    fixes = [CONTAINER_FIX] if refused and LINUX and in_container() else []
    fixes += [m["fix"] for m in missing if m.get("fix")][:1]
    fixes.append(UNCONTAINED_FIX)
    what = (
        "unshare gives namespaces but no file-system wall"
        if kind == "unshare"
        else "no containment engine works here"
    )
    return {
        "layer": "containment",
        "reason": f"this host cannot keep a snippet away from your files ({what}: {why})",
        "fix": "; or ".join(dict.fromkeys(fixes)),
    }


def disabled(layer: str, choice: str, by: str = "") -> dict[str, str]:
    """The gap of a layer turned off by ``choice`` (or ``by`` what)."""
    return {
        "layer": layer,
        "reason": f"turned off by {by or f'{ISOLATION_ENV}={choice}'}",
        "fix": f"unset {ISOLATION_ENV} (or set it to auto)",
    }
