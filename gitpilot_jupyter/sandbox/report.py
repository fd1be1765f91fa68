"""Text every face shows the same way: the status block, the run footer, why a run failed.

The neutral home of shared text rendering: the CLI, the kernel magic and the
widgets format these through here, so no face imports another to print them.
"""

from __future__ import annotations

import textwrap

from .local.off import OFF_LABEL, is_off
from .plans import ExecutionPlan
from .records import Status
from .results import RunResult, result_badges


def backend_name(backend: str | None) -> str:
    """The backend as text names it: ``off`` says that it is pass-through, with no sandbox."""
    return f"{backend}, {OFF_LABEL}" if is_off(backend) else str(backend)


#: Columns the status block's layer lines fit in (a notebook cell's width, about).
STATUS_WIDTH = 88

#: What each isolation layer keeps from the snippet, as the status block groups them
#: (a layer not named here is shown under "other").
LAYER_GROUPS = {
    "files": (
        "tempdir", "fs-allowlist", "ro-root", "private-tmp", "hidden-credentials",
        "proc-sys-ro", "landlock", "disk-cap",
    ),
    "user": ("userns", "non-root", "no-groups", "own-uid"),
    "secrets": ("env-scrub",),
    "processes": (
        "pidns", "ipcns", "utsns", "cgroupns", "seccomp", "no-new-privs", "session-kill",
    ),
    "network": ("netns", "net-denied"),
    "limits": (
        "cgroup-memory", "cgroup-pids", "cgroup-cleanup", "rlimit-fsize", "rlimit-cpu",
        "rlimit-data", "rlimit-nproc",
    ),
}  # fmt: skip


def isolation_lines(layers: list[str], *, verbose: bool = False) -> list[str]:
    """The isolation layers in force, by what they guard; their ids only when ``verbose``."""
    if not layers:
        return ["isolation        none"]
    grouped: dict[str, list[str]] = {}
    for layer in layers:
        group = next((g for g, ids in LAYER_GROUPS.items() if layer in ids), "other")
        grouped.setdefault(group, []).append(layer)
    count = f"{len(layers)} layer{'s' * (len(layers) != 1)}"
    if not verbose:
        return [f"isolation        {count}: {', '.join(grouped)} (--verbose names each)"]
    lines = [f"isolation        {count}"]
    for group, ids in grouped.items():
        # Wrapped between ids, never inside one (``fs-allowlist`` stays whole).
        wrapped = textwrap.wrap(
            ", ".join(ids), STATUS_WIDTH - 17, break_on_hyphens=False, break_long_words=False
        )
        lines += [f"  {group if i == 0 else '':14} {part}" for i, part in enumerate(wrapped)]
    return lines


def status_text(status: Status, *, verbose: bool = False) -> str:
    """The service status as a text block (``jupyter sandbox status``, ``%sandbox status``);
    ``verbose`` names each isolation layer.
    """
    health = "ok" if status["ok"] else "NOT OK"
    lines = [f"backend          {backend_name(status['backend'])}  ({health})"]
    if status.get("error"):
        lines.append(f"error            {status['error']}")
    if status.get("env_override"):
        lines.append(f"env override     {status['env_override']}")
    if status.get("settings_error"):
        lines.append(f"settings error   {status['settings_error']}")
    lines.append(f"require approval {status['require_approval']}")
    lines += isolation_lines(status["isolation"], verbose=verbose)
    if status.get("network_on"):
        lines.append(f"network on       {status['network_on']}")
    if status.get("kept"):
        lines.append(f"kept             {status['kept']}")
    for gap in status["isolation_report"]["unavailable"]:
        lines.append(f"  missing {gap['layer']}: {gap['reason']}\n    fix: {gap['fix']}")
    langs = ", ".join(f"{k} {'yes' if v else 'missing'}" for k, v in status["languages"].items())
    lines.append(f"interpreters     {langs}")
    lines.append(f"settings file    {status['settings_path']}")
    lines.append(f"version          {status['version']}")
    return "\n".join(lines) + "\n"


#: How teacher-facing text names a client's path (``SandboxClient.path``): who launched
#: the snippet, in words rather than the client's name for it.
LAUNCHERS = {"in-process": "this kernel", "REST": "the Jupyter server"}


def launcher(path: str) -> str:
    """``the Jupyter server`` for the ``REST`` path (an unknown path as it is)."""
    return LAUNCHERS.get(path, path)


def footer(result: RunResult, path: str | None = None) -> str:
    """``[sandbox] subprocess · exit 0 · 12 ms · launched by this kernel``: after every run."""
    where = f" · launched by {launcher(path)}" if path else ""
    return f"[sandbox] {result_badges(result)}{where}"


def failure_message(result: RunResult) -> str:
    """Why a run counts as failed, in one line."""
    if result.cancelled:
        return stopped_message(result.duration_ms / 1000)
    if result.timed_out:
        return f"the {result.language} snippet timed out and was killed ({result.duration_ms} ms)"
    if result.exit_code == -1:
        return f"the {result.language} snippet could not be launched (see its stderr)"
    return f"the {result.language} snippet exited with code {result.exit_code}"


def stopped_message(seconds: float | None, where: str | None = None) -> str:
    """The one line a stopped run ends with (an interrupted cell, the CLI's Ctrl-C)."""
    if seconds is None:
        return "stopped before the snippet started: nothing ran"
    place = f" by {launcher(where)}" if where else ""
    return f"stopped after {seconds:.1f} s: the snippet was killed{place}"


def blocked_message(plan: ExecutionPlan) -> str:
    """Why a blocked plan never runs."""
    return f"refused by policy, nothing ran: {plan.blocked_reason}"
