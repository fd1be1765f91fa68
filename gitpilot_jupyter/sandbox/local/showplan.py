"""The launch plan the engine in force would use for a run now, as text.

``jupyter sandbox debug --show-launch`` prints it: what :meth:`.LayeredIsolator.prepare`
would start for a python run (network off, or on), built from the same pieces
(the engine's chain, the host view, the cgroup tree, the rlimits, the seccomp
filter) without making anything: no run folder, no cgroup, no uid taken. The run
folder and the run cgroup are shown with ``XXXXXXXX`` where their random part goes.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import tempfile
from pathlib import Path

from ..backend import ResourceLimits
from ..languages import snippet_filename
from ..rich import python_command
from . import cgroups, launchplan, nsfree, subids
from .chainsteps import exec_prefix, launch_tools, stage_steps
from .cleanup import RUN_DIR_PREFIX
from .confine import seccomp_filter
from .layered import LayeredIsolator
from .rlimits import RlimitPlan, plan_rlimits

#: Where a run's random parts go in the plan shown.
RANDOM = "XXXXXXXX"
_RLIMIT_NAMES = {
    getattr(resource, name): name for name in dir(resource) if name.startswith("RLIMIT_")
}


def _cgroup_run(tree: cgroups.CgroupTree | None) -> cgroups.CgroupRun | None:
    """A run cgroup as :meth:`.CgroupTree.create` would name it (nothing is made)."""
    if tree is None:
        return None
    name = f"{cgroups.run_prefix()}{RANDOM}"
    parents = dict.fromkeys(p for p in (tree.memory_parent, tree.pids_parent) if p is not None)
    return cgroups.CgroupRun(version=tree.version, dirs=[p / name for p in parents])


def _cgroup_lines(
    tree: cgroups.CgroupTree | None, run: cgroups.CgroupRun | None, limits: ResourceLimits
) -> list[str]:
    """What the run cgroup caps, a line per cgroup folder."""
    if tree is None or run is None:
        return ["no run cgroup: memory and processes are capped by rlimits only"]
    memory = f"memory.max {limits.memory_mb} MiB, no swap"
    pids = f"pids.max {limits.max_processes}"
    caps: dict[Path, list[str]] = {}
    for parent, cap in ((tree.memory_parent, memory), (tree.pids_parent, pids)):
        if parent is not None:
            folder = next(d for d in run.dirs if d.parent == parent)
            caps[folder] = [*caps.get(folder, []), cap]
    return [f"run cgroup {folder}: {', '.join(c)}" for folder, c in caps.items()]


def _rlimit_lines(rlimits: RlimitPlan) -> list[str]:
    return [f"setrlimit({_RLIMIT_NAMES.get(w, w)}, {v})" for w, v in rlimits.limits]


def launch_plan(
    isolator: LayeredIsolator,
    argv: list[str],
    *,
    allow_network: bool,
    limits: ResourceLimits | None = None,
) -> launchplan.LaunchPlan | None:
    """The plan of a cold run of ``argv`` now; None for an engine with no wall to show."""
    limits = limits or ResourceLimits()
    workdir = Path(tempfile.gettempdir()) / f"{RUN_DIR_PREFIX}{RANDOM}"
    engine = isolator.engine_tool()
    tree = isolator.cgroup_tree()
    run = _cgroup_run(tree)
    covered = tree.layers() if tree is not None else []
    described = _cgroup_lines(tree, run, limits)
    if isinstance(engine, nsfree.Engine):
        as_root = os.geteuid() == 0
        uid = nsfree.RUN_UID_BASE if as_root else os.geteuid()
        rlimits = plan_rlimits(
            limits,
            memory="cgroup-memory" not in covered,
            processes="cgroup-pids" not in covered,
            run_uid=uid if as_root else None,
        )
        hidden = [*isolator.hidden_paths()[0], *isolator.hidden_paths()[1]]
        rules, _ = nsfree.fs_rules(argv[0], workdir, hidden)
        joins = [f"write 0 to {p}" for p in run.join_files()] if run is not None else []
        return launchplan.walled_plan(
            argv,
            rules=launchplan.Rules(
                execute=rules.execute,
                read=rules.read,
                write=rules.write,
                devices=rules.devices,
                deny_tcp=not allow_network,
                scoped=True,
            ),
            seccomp=launchplan.SECCOMP_WALLED_INET if allow_network else launchplan.SECCOMP_WALLED,
            limits=[*described, *joins, *_rlimit_lines(rlimits)],
            ids=(uid, uid) if as_root else (os.geteuid(), os.getegid()),
            dropped=as_root,
            network="the host's network (only with the administrator's opt-in)"
            if allow_network
            else "none: no AF_INET/AF_INET6/AF_NETLINK/AF_PACKET/AF_VSOCK sockets, TCP denied",
        )
    if engine is None or engine.kind != "bwrap" or engine.confine is None:
        return None
    chain = engine.confine
    rlimits = plan_rlimits(
        limits,
        memory="cgroup-memory" not in covered,
        processes="cgroup-pids" not in covered,
        own_uid=chain.drops,  # (each run a host uid of its own)
    )
    view = isolator.host_view(argv).view
    egress = engine.egress_error is None
    facts = chain.facts(
        argv, workdir=workdir, view=view, blocked=allow_network and egress and bool(chain.net_tools)
    )
    facts = dataclasses.replace(facts, snippet=argv[-1], snippet_fifo=False, prestarted=False)
    # Each run that drops has host ids of its own: the first ones here.
    if chain.as_root:
        facts = dataclasses.replace(facts, sandbox_ids=(nsfree.RUN_UID_BASE, nsfree.RUN_UID_BASE))
    elif chain.idmap is not None:
        facts = dataclasses.replace(facts, mapped_ids=subids.run_ids(chain.idmap).first())
    tools = launch_tools()
    first = (
        stage_steps(chain.shell, rlimits, run, own_uid=chain.drops) if tools is not None else None
    )
    plan = chain.plan(
        argv,
        workdir=workdir,
        allow_network=allow_network,
        view=view,
        disk_mb=limits.disk_mb,
        bpf=seccomp_filter()[0],
        facts=facts,
        egress=egress,
        first=first or (),
    )
    steps = plan.steps
    shown = [*described, *(first or [])]
    if first is None:
        prefix = exec_prefix(tools, rlimits, run) if tools is not None else None
        if prefix:
            steps = (
                launchplan.Step(tuple(prefix), "the limits prefix: cgroup join, rlimits"),
                *steps,
            )
            shown.append("(set by the limits prefix, step 1)")
        elif prefix is None:
            shown += ["(between fork and exec)", *_rlimit_lines(rlimits)]
    return dataclasses.replace(plan, steps=steps, limits=tuple(shown))


def show_launch(isolator: LayeredIsolator, python: str, *, allow_network: bool) -> str:
    """:func:`launch_plan` of ``python inline.py`` as text, with the engine's refusal
    (if it refuses such a run here) first."""
    engine = isolator.engine
    lines = []
    refusal = isolator.refusal(allow_network=allow_network)
    if refusal is not None:
        accepted = " (accepted by the administrator)" if isolator.allow_uncontained else ""
        lines.append(f"refused here{accepted}: {refusal['reason']}\n\n")
    command = python_command(python, snippet_filename("python"))
    plan = launch_plan(isolator, command, allow_network=allow_network)
    if plan is None:
        return "".join(lines) + f"engine: {engine}: no wall to show (a run is not contained)\n"
    return "".join(lines) + launchplan.render(plan)
