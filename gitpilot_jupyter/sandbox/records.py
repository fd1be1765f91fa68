"""Typed records: the shapes that cross faces (status, checks, warnings, gaps, steps).

They are :class:`~typing.TypedDict` so they stay plain JSON-ready dicts on the
wire while the type checker holds every reader (the CLI, the magic, the widgets,
the agents' text) to the same keys. ``rest-api.yml`` documents the same shapes
(``Status``, ``Check``, ``Warning``, ``Step``, ``RunningPlan``), and a test holds the lab's
TypeScript types to it.
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict


class Check(TypedDict):
    """One pre-flight check of a plan."""

    label: str
    ok: bool


class PlanWarning(TypedDict):
    """One finding of the code scan."""

    severity: Literal["high", "medium", "low"]
    label: str
    detail: str


class IsolationGap(TypedDict):
    """An isolation layer this host cannot give: why, and how to enable it."""

    layer: str
    reason: str
    fix: str


class _IsolationLayers(TypedDict):
    layers: list[str]
    unavailable: list[IsolationGap]


class IsolationReport(_IsolationLayers, total=False):
    """The local isolation stack: layers in force and the missing ones (with the mechanism)."""

    #: The containment engine in force: ``bwrap``, ``landlock``, ``unshare`` or ``none``.
    engine: str
    namespaces: str
    cgroups: str
    choice: str


class LifecycleStep(TypedDict):
    """One Docker call of a lifecycle action, written as the equivalent ``docker`` command."""

    cmd: str
    exit_code: int
    stdout: str
    stderr: str
    duration_ms: int


class PoolReport(TypedDict):
    """The warm pool of the ``subprocess`` backend, as status shows it."""

    mode: str
    #: Runs are started ahead here (False: ``reason`` says why not).
    active: bool
    reason: str | None
    max_slots: int
    min_slots: int
    idle_sec: float
    #: Slots waiting now, slots being started, runs that found one, runs that did not.
    idle: int
    starting: int
    hits: int
    misses: int


class CapacityReport(TypedDict):
    """The load of the server's runs against its caps (``Status.capacity``)."""

    runs: int
    max_runs: int
    max_runs_per_user: int
    memory_committed_mb: int
    #: None: no memory cap.
    memory_budget_mb: int | None
    #: Batch items waiting for a slot.
    waiting: int
    #: Runs refused ``busy`` since the server started.
    refused: int


class Status(TypedDict):
    """``GET /api/sandbox/status``: the live backend, settings (masked), health, isolation."""

    backend: str | None
    settings: dict[str, Any]
    has_token: bool
    ok: bool
    error: str | None
    remote: Any
    env_override: str | None
    env_error: str | None
    require_approval: bool
    #: The longest timeout a run may ask for or the settings may save, in seconds (the
    #: administrator's ``max_timeout_sec``; the shortest is 1): what settings forms offer.
    max_timeout_sec: int
    isolation: list[str]
    #: Why a network-on run is refused on the live backend (the refusal its plan gets,
    #: with the fix), or None when it is not; when the settings' runs are network-on,
    #: the refusal is the ``error`` instead.
    network_on: str | None
    #: What the live backend's host keeps of each run that this server cannot remove
    #: (``matrixlab`` where the lifecycle does not manage the Runner), or None.
    kept: str | None
    isolation_report: IsolationReport
    settings_error: str | None
    settings_path: str
    allowed_backends: list[str]
    #: How many plans wait for someone else's decision (what GET /plans lists).
    waiting_plans: int
    #: Runs under way against the server's caps.
    capacity: CapacityReport
    languages: dict[str, bool]
    #: The warm pool of the local ``subprocess`` backend.
    pool: PoolReport
    version: str


class RunningPlan(TypedDict):
    """An approved plan whose run is under way (``GET /api/sandbox/plans``, ``running``).

    ``state`` is ``running``, or ``stopping`` once someone asked to stop it; the
    entry leaves when the run ends. ``DELETE /api/sandbox/runs/{run_id}`` stops it.
    """

    plan: dict[str, Any]
    run_id: str
    state: Literal["running", "stopping"]
    started_at: float
    #: Who approved it: ``user`` (a person) or ``agent`` (an agent in ``auto`` mode).
    approved_by: str
