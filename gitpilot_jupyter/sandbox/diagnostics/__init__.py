"""``debug``: walk the whole sandbox path and say which stage breaks, and how to fix it.

Stages (``docs/dev/contract.md`` §10): settings, local hello-world per language,
stdin, output kept across a timeout kill, the approval gate, the isolation layers (what is
available, and a probe that checks the claimed ones really hold), what joining a run cgroup
costs here, and with
``matrixlab`` the Runner (health, its Docker, capabilities, a snippet runs).

Read-only: the settings are only read, and plans live in a private store, so
nothing the user has (settings, pending plans, audit log) changes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..errors import BackendNotAllowed
from ..local.backends import SubprocessSandbox
from ..plans import PlanStore
from ..service import SandboxService
from .isolation import cgroup_join_stage, egress_check, isolation_check, isolation_layers
from .launch import launch_text
from .local import HELLO, approval_stage, hello_stage, settings_stage, stdin_stage, timeout_stage
from .runner import runner_stages
from .stage import FAIL, PASS, SKIP, Stage

__all__ = [
    "FAIL",
    "PASS",
    "SKIP",
    "Stage",
    "failed",
    "launch_text",
    "probe_service",
    "render_text",
    "run_diagnostics",
]


def probe_service(service: SandboxService, *, require_approval: bool = True) -> SandboxService:
    """A service sharing ``service``'s settings, policy and isolation, with its own plans.

    Nothing it does is visible to the user's service: no pending plans, no audit.
    """
    local = service.backends.backend("subprocess", service.settings.effective().settings)
    return SandboxService(
        settings=service.settings,
        policy=service.policy,
        plans=PlanStore(),
        interpreters=service.interpreters,
        isolator=local.isolator if isinstance(local, SubprocessSandbox) else None,
        require_approval=require_approval,
        allowed_backends=service.backends.allowed_backends,
        root_dir=service.root_dir,
    )


async def run_diagnostics(service: SandboxService, *, matrixlab: bool = False) -> list[Stage]:
    """Every stage, in order; a stage that raises is a FAIL, never an exception."""
    probe = probe_service(service)
    steps: list[tuple[str, Callable[[], Awaitable[Stage | list[Stage]]]]] = [
        ("settings", lambda: settings_stage(service)),
        *[
            (f"local {lang} hello-world", lambda lang=lang: hello_stage(probe, lang))
            for lang in HELLO
        ],
        ("stdin is /dev/null", lambda: stdin_stage(probe)),
        ("output kept across a timeout kill", lambda: timeout_stage(probe)),
        ("approval gate", lambda: approval_stage(service, probe)),
        ("isolation layers", lambda: isolation_layers(probe)),
        ("run cgroup join", lambda: cgroup_join_stage(probe)),
        ("isolation check", lambda: isolation_check(probe)),
        ("network-on check", lambda: egress_check(probe)),
    ]
    if matrixlab:
        steps.append(("runner", lambda: runner_stages(service, probe)))
    stages: list[Stage] = []
    for name, step in steps:
        try:
            found = await step()
        except BackendNotAllowed as exc:  # the administrator's choice, not a failure
            found = Stage(name, SKIP, exc.message)
        except Exception as exc:  # a broken stage is a finding, not a crash
            found = Stage(name, FAIL, f"{type(exc).__name__}: {exc}", "report this as a bug")
        stages.extend(found if isinstance(found, list) else [found])
    if not matrixlab:
        stages.append(Stage("runner", SKIP, "not checked", "jupyter sandbox debug --matrixlab"))
    return stages


def failed(stages: list[Stage]) -> bool:
    """True when any stage failed."""
    return any(s.status == FAIL for s in stages)


def render_text(stages: list[Stage]) -> str:
    """The stages as aligned text: one line each, and the fix under a failure."""
    width = max((len(s.name) for s in stages), default=0)
    lines = []
    for stage in stages:
        lines.append(f"{stage.status}  {stage.name:<{width}}  {stage.detail}")
        if stage.fix and stage.status != PASS:
            lines.append(f"      {'':<{width}}  fix: {stage.fix}")
    verdict = "FAILED" if failed(stages) else "all stages passed or were skipped"
    lines.append(f"\n{verdict}")
    return "\n".join(lines) + "\n"
