"""Which backend a call runs on: resolution, the administrator's allow-list, the objects.

A part of :class:`~gitpilot_jupyter.sandbox.service.service.SandboxService` (held, not
inherited): explicit > env > file > default, checked against the allowed backends
every time, and the backend objects (the local ones kept, MatrixLab made per call).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..backend import ResourceLimits, SandboxBackend
from ..errors import BackendNotAllowed, UnknownBackend
from ..languages import Interpreters
from ..local.backends import NullSandbox, SubprocessSandbox
from ..local.isolation import Isolator
from ..local.pool import PoolConfig
from ..rich import DisplayCaps
from ..settings import (
    EffectiveSettings,
    SandboxSettings,
    SettingsStore,
    allowed_backends_from_env,
    check_backend,
    how_to_allow,
)

if TYPE_CHECKING:
    from ..matrixlab.config import LifecycleConfig


def limits_of(settings: SandboxSettings) -> ResourceLimits:
    """The resource limits ``settings`` put on a run."""
    return ResourceLimits(
        memory_mb=settings.memory_limit_mb,
        max_processes=settings.max_processes,
        max_file_size_mb=settings.max_file_size_mb,
        disk_mb=settings.disk_limit_mb,
        display=DisplayCaps(
            item_mb=settings.max_display_item_mb,
            run_mb=settings.max_display_run_mb,
            outputs=settings.max_display_outputs,
        ),
    )


class BackendResolver:
    """The backend for a call, checked against the allow-list, and its object."""

    def __init__(
        self,
        settings: SettingsStore,
        interpreters: Interpreters,
        *,
        isolator: Isolator | None = None,
        allowed_backends: Iterable[str] | None = None,
        pool: PoolConfig | None = None,
        matrixlab_config: LifecycleConfig | None = None,
    ) -> None:
        self.settings = settings
        #: The administrator's description of the Runner's host (env applies per call).
        self.matrixlab_config = matrixlab_config
        self.interpreters = interpreters
        #: The administrator's list, else the environment's (whose default leaves ``off`` out).
        self.allowed_backends = (
            tuple(allowed_backends)
            if allowed_backends
            else allowed_backends_from_env(settings.environ)
        )
        self.local: dict[str, SandboxBackend] = {
            "subprocess": SubprocessSandbox(interpreters, isolator, pool),
            "off": NullSandbox(interpreters),
        }

    @property
    def subprocess(self) -> SubprocessSandbox:
        """The local subprocess backend (its isolator reports what this host confines)."""
        local = self.local["subprocess"]
        assert isinstance(local, SubprocessSandbox)
        return local

    def resolve(self, backend: str | None = None) -> tuple[str, EffectiveSettings]:
        """The backend for a call: explicit > env > file > default, checked every time."""
        effective = self.settings.effective()
        if backend is not None:
            name = check_backend(backend)
        elif effective.env_error and effective.env_override == "GITPILOT_SANDBOX":
            raise UnknownBackend(effective.env_error)
        else:
            name = effective.settings.backend
        return self.check_allowed(name), effective

    def check_allowed(self, name: str) -> str:
        """``name`` when the administrator allows that backend, else :class:`BackendNotAllowed`."""
        if name not in self.allowed_backends:
            raise BackendNotAllowed(
                f"the sandbox backend {name!r} is not allowed here (allowed: "
                f"{list(self.allowed_backends)}); {how_to_allow(name, self.allowed_backends)}"
            )
        return name

    def backend(self, name: str, settings: SandboxSettings | None = None) -> SandboxBackend:
        """The backend object for ``name`` configured from ``settings`` (None: the
        settings in force now, read only for a backend made per call)."""
        if name in self.local:
            return self.local[name]
        from ..matrixlab.backend import MatrixLabSandbox
        from ..matrixlab.config import LifecycleConfig

        if settings is None:
            settings = self.settings.effective().settings
        host = (self.matrixlab_config or LifecycleConfig()).with_env(self.settings.environ)
        managed = host.manages(settings.matrixlab_url, self.settings.environ)
        return MatrixLabSandbox(
            url=settings.matrixlab_url,
            token=settings.matrixlab_token,
            image=settings.matrixlab_image,
            network_isolated=host.network_isolated,
            max_workspace_mb=host.max_workspace_mb,
            jobs_dir=host.jobs_path(self.settings.config_dir),
            runner_container=host.container_name if managed else None,
            managed=managed,
            environ=self.settings.environ,
        )

    def command(self, language: str) -> list[str]:
        """The interpreter command shown for ``language``."""
        return self.interpreters.display_command(language)

    async def aclose(self) -> None:
        """Release the local backends' resources."""
        for backend in self.local.values():
            await backend.aclose()
