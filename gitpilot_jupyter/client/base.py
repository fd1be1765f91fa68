"""What every way to the sandbox offers: :class:`SandboxClient`.

Two clients implement it: :class:`~.local.LocalClient` (a
:class:`~gitpilot_jupyter.sandbox.service.service.SandboxService` in this process) and
:class:`~.rest.RestClient` (the REST API of a Jupyter server, with NDJSON
streaming). Both give the same plans and envelopes and raise the same typed
errors (:class:`~gitpilot_jupyter.sandbox.errors.SandboxError` with the core's
``code``), so the kernel magic, the widgets, the agents and the CLI never care
which path runs; :func:`~.resolve.make_client` picks one (``auto | local | URL``).

Runs go by approval token alone: the approved plan is what runs, so no face
turns a plan back into run arguments.
"""

from __future__ import annotations

import abc
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..sandbox.backend import OutputCallback
from ..sandbox.batch import BatchItem, BatchPlan, ClusterAccess
from ..sandbox.batch.runner import BatchWatch
from ..sandbox.claims import AgentPlan, ClaimAnswer
from ..sandbox.matrixlab.ops import LIFECYCLE_ACTIONS, ProgressCallback
from ..sandbox.plans import ExecutionPlan, PlannedRun
from ..sandbox.records import Status
from ..sandbox.request import NO_OPTIONS, RunOptions
from ..sandbox.results import RunResult

__all__ = ["LIFECYCLE_ACTIONS", "ProgressCallback", "SandboxClient"]


class SandboxClient(abc.ABC):
    """Plan, approve and run snippets, decide others' plans, settings, MatrixLab."""

    #: Which path runs, as the footer names it (``in-process`` or ``REST``).
    path: str = ""
    #: ``in-process`` or the Jupyter server's URL: where plans wait for approval.
    where: str = ""

    def __init__(self, session_id: str | None = None) -> None:
        self.session_id = session_id or "kernel-" + uuid.uuid4().hex[:12]

    @property
    def in_process(self) -> bool:
        """True when plans live in this process only (nobody else can approve them)."""
        return False

    @abc.abstractmethod
    async def plan(self, options: RunOptions) -> ExecutionPlan:
        """Plan a snippet in this client's session (``options.env``: server variables)."""

    @abc.abstractmethod
    async def approve(
        self, plan_id: str, *, approved_by: str = "user", for_planner: bool = False
    ) -> dict[str, Any]:
        """Approve a pending plan: ``{approval_token, plan_id, expires_in}``.

        ``for_planner``: approve a plan someone else made (an agent's), not bound to
        this client's session; the planner collects the token with its claim secret.
        """

    @abc.abstractmethod
    async def run(
        self, token: str, *, on_output: OutputCallback | None = None, run_id: str | None = None
    ) -> RunResult:
        """Run the approved plan ``token`` stands for, streaming its output to ``on_output``.

        The same call as :meth:`~gitpilot_jupyter.sandbox.service.service.SandboxService.run`.

        ``run_id`` names the run so :meth:`cancel` can stop it before it ends.
        """

    @abc.abstractmethod
    async def plan_and_run(
        self,
        options: RunOptions,
        *,
        confirmed: bool = False,
        on_output: OutputCallback | None = None,
        run_id: str | None = None,
    ) -> PlannedRun:
        """Plan and, where the caller may approve it alone, approve and run it: one call.

        The caller's act is the approval (a cell's execution). The core's one rule decides
        (:meth:`~gitpilot_jupyter.sandbox.service.service.SandboxService.plan_and_run`): a plan
        that needs a person's look (a high warning, unless ``confirmed``) comes back
        unrun (``result`` ``None``), pending for an approval card; a blocked plan raises
        ``plan_blocked``. ``run_id`` names the run so :meth:`cancel` can stop it.
        """

    @abc.abstractmethod
    async def cancel(self, run_id: str) -> None:
        """Stop the run ``run_id``: it is killed where it runs and answers ``cancelled``."""

    @abc.abstractmethod
    async def run_file(self, run_id: str, name: str) -> bytes:
        """The bytes of ``name`` (relative to ``out/``), a file run ``run_id`` handed back
        (one of its ``files``); ``run_file_not_found`` when it is not this caller's."""

    @abc.abstractmethod
    async def sessions(self) -> list[dict[str, Any]]:
        """This caller's sessions (kernels kept between cells), oldest first.

        A session's cell is planned with ``RunOptions(session=NAME)`` and run by its
        token as any run; its first cell starts it.
        """

    @abc.abstractmethod
    async def start_session(
        self, name: str, *, allow_network: bool | None = None
    ) -> dict[str, Any]:
        """Open session ``name`` for this caller, its network as asked (else the settings')
        for its whole life; its info. ``session_exists`` when it is open already."""

    @abc.abstractmethod
    async def stop_session(self, name: str) -> None:
        """Stop this caller's session ``name``: nothing of it is left."""

    @abc.abstractmethod
    async def restart_session(self, name: str) -> dict[str, Any]:
        """Start this caller's session ``name`` afresh (its state is gone); its new info."""

    @abc.abstractmethod
    async def interrupt_session(self, name: str) -> None:
        """Interrupt the cell under way in this caller's session ``name`` (its state stays)."""

    @abc.abstractmethod
    async def pending(self) -> list[ExecutionPlan]:
        """Plans waiting for a person's approval that this caller may see, oldest first."""

    @abc.abstractmethod
    async def reject(self, plan_id: str) -> None:
        """Drop a pending plan unapproved: it never runs and a waiting planner learns so."""

    @abc.abstractmethod
    async def plan_for_agent(self, options: RunOptions, *, auto_approve: bool) -> AgentPlan:
        """An agent's plan: its own token (``auto_approve``) or a claim secret (``ask``)."""

    @abc.abstractmethod
    async def claim(self, plan_id: str, secret: str) -> ClaimAnswer:
        """``pending``, or ``approved`` with the token once a person approved."""

    @abc.abstractmethod
    async def status(self) -> Status:
        """The service status (backend, masked settings, health, env override...)."""

    @abc.abstractmethod
    async def config(self) -> dict[str, Any]:
        """The effective settings, masked (``has_token``, never the token); no health probe."""

    @abc.abstractmethod
    async def settings_file(self) -> str:
        """Where the settings this client changes are saved (on the server for REST)."""

    @abc.abstractmethod
    async def configure(self, changes: Mapping[str, object], *, confirm: bool = False) -> Status:
        """Persist a subset of settings; answer the new status.

        ``confirm=True`` says the user confirmed the change: switching the backend to
        ``off`` is refused without it (``confirmation_required``). Pass it only after
        asking (:func:`~gitpilot_jupyter.sandbox.local.off.off_confirmation`).
        """

    @abc.abstractmethod
    async def test_matrixlab(
        self, url: str | None = None, token: str | None = None
    ) -> dict[str, Any]:
        """Test connection to a MatrixLab Runner (unsaved url / token allowed)."""

    @abc.abstractmethod
    async def lifecycle(
        self, action: str, progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        """``status`` (inspection) or ``install`` / ``start`` / ``stop`` of the Runner.

        ``progress`` receives install's pull events where the path can deliver them.
        """

    @abc.abstractmethod
    async def plan_batch(
        self,
        items: Sequence[BatchItem],
        options: RunOptions = NO_OPTIONS,
        *,
        deadline_sec: int | None = None,
    ) -> BatchPlan:
        """Plan every item (each as a single run with ``options``); keep the batch pending."""

    @abc.abstractmethod
    async def approve_batch(self, batch_id: str) -> dict[str, Any]:
        """One single-use token for the whole manifest: ``{approval_token, batch_id, ...}``."""

    @abc.abstractmethod
    async def run_batch(
        self,
        batch: BatchPlan,
        token: str | None,
        *,
        watch: BatchWatch,
        out: str | Path | None = None,
        workers: int | None = None,
        cluster: str | ClusterAccess | None = None,
    ) -> dict[str, Any]:
        """Run the approved ``batch`` where this client runs; answer its report.

        Each finished item's record goes to ``watch`` as it comes; ``out`` is the
        results file (JSONL) written on this machine; ``cluster`` (Dask) is for the
        in-process path only (a server runs batches where its administrator says).
        """

    async def approve_and_run(
        self,
        plan: ExecutionPlan,
        *,
        on_output: OutputCallback | None = None,
        run_id: str | None = None,
    ) -> RunResult:
        """Approve (the caller is the approver, e.g. a cell's execution) and run ``plan``."""
        approval = await self.approve(plan.plan_id, approved_by="cell")
        return await self.run(str(approval["approval_token"]), on_output=on_output, run_id=run_id)
