"""Status assembly: the live backend, masked settings, health, approval and isolation.

A part of :class:`~gitpilot_jupyter.sandbox.service.service.SandboxService` (held, not
inherited): it builds the typed :class:`~.records.Status` every face renders.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..._version import __version__
from ..errors import BackendNotAllowed, UnknownBackend
from ..languages import CANONICAL_LANGUAGES, Interpreters
from ..local.backends import SubprocessSandbox
from ..plans import PlanStore
from ..records import CapacityReport, Status
from ..settings import SettingsStore
from .resolver import BackendResolver


class StatusReporter:
    """Assembles the service's status from its parts."""

    def __init__(
        self,
        *,
        settings: SettingsStore,
        resolver: BackendResolver,
        interpreters: Interpreters,
        plans: PlanStore,
        require_approval: Callable[[], bool],
        max_timeout_sec: Callable[[], int],
        capacity: Callable[[], CapacityReport],
    ) -> None:
        self.settings = settings
        self.resolver = resolver
        self.interpreters = interpreters
        self.plans = plans
        self._require_approval = require_approval
        self._max_timeout_sec = max_timeout_sec
        self._capacity = capacity

    async def status(self) -> Status:
        """Live backend, masked settings, health, env override, approval and isolation."""
        effective = self.settings.effective()
        settings = effective.settings
        error: str | None = effective.env_error
        name: str | None = None
        remote: Any = None
        ok = error is None
        isolation: list[str] = []
        network_on: str | None = None
        kept: str | None = None
        try:
            name, _ = self.resolver.resolve()
        except (UnknownBackend, BackendNotAllowed) as exc:
            error, ok = exc.message, False
        if name is not None:
            backend = self.resolver.backend(name, settings)
            health = await backend.health()
            ok = ok and bool(health.get("ok"))
            # Both, when the environment's settings and the backend's health each say something.
            error = "; ".join(str(e) for e in (error, health.get("error")) if e) or None
            remote = health.get("remote")
            kept = backend.kept()
            if isinstance(backend, SubprocessSandbox):
                # The network layer depends on the setting a run would use.
                isolation = backend.isolation(allow_network=settings.allow_network)
            else:
                isolation = backend.isolation()
            # A backend that refuses the runs the settings make is not a healthy one; one
            # that refuses only network-on runs says so in the words their plans get.
            refused = backend.refusal(allow_network=settings.allow_network)
            if refused is not None:
                ok, error = False, error or refused.message
            elif (network_refused := backend.refusal(allow_network=True)) is not None:
                network_on = network_refused.message
        local = self.resolver.subprocess
        return {
            "backend": name,
            "settings": settings.masked(),
            "has_token": bool(settings.matrixlab_token),
            "ok": ok,
            "error": error,
            "remote": remote,
            "env_override": effective.env_override,
            "env_error": effective.env_error,
            "require_approval": self._require_approval(),
            "max_timeout_sec": self._max_timeout_sec(),
            "isolation": isolation,
            "network_on": network_on,
            "kept": kept,
            "isolation_report": local.isolator.report(),
            "pool": local.pool_report(),
            "settings_error": effective.settings_error,
            "settings_path": str(self.settings.path),
            "allowed_backends": list(self.resolver.allowed_backends),
            "waiting_plans": len(self.plans.waiting()),
            "capacity": self._capacity(),
            "languages": {
                lang: self.interpreters.resolve(lang) is not None for lang in CANONICAL_LANGUAGES
            },
            "version": __version__,
        }
