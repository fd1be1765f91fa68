"""The warm pool's configuration: its modes and limits, and the key a slot is made for."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...backend import ResourceLimits
from ...errors import InvalidSetting

#: ``auto`` (on where the host allows it), ``off``, or ``always`` (every run through a
#: slot, a miss waits for one: no cold path, as the test suite uses it).
POOL_ENV = "GITPILOT_SANDBOX_POOL"
POOL_MODES = ("auto", "off", "always")
#: The most idle slots (all keys together) for in-process use, when no trait sets it.
POOL_MAX_ENV = "GITPILOT_SANDBOX_POOL_MAX"
#: ``1``: a python slot's interpreter is started too, waiting for its code (:mod:`.prestart`).
PRESTART_ENV = "GITPILOT_SANDBOX_POOL_PRESTART"


@dataclass(frozen=True)
class PoolConfig:
    """How big the pool may grow and how fast it refills (``SandboxApp.pool_*`` traits)."""

    mode: str = "auto"
    #: Idle (and starting) slots at most, all keys together.
    max_slots: int = 8
    #: Slots kept per key in use, whatever the demand.
    min_slots: int = 1
    #: A slot, or a key's demand, unused this long is retired (seconds).
    idle_sec: float = 300.0
    #: Slots started at once (each is a short burst of work on one core).
    spawn_concurrency: int = 2
    #: Start a python slot's interpreter ahead too (see :mod:`.prestart`).
    prestart: bool = True

    def __post_init__(self) -> None:
        if self.mode not in POOL_MODES:
            raise InvalidSetting(f"pool must be one of {list(POOL_MODES)}, got {self.mode!r}")
        if not 0 <= self.min_slots <= self.max_slots:
            raise InvalidSetting("pool_min_slots must be between 0 and pool_max_slots")
        if self.idle_sec <= 0 or self.spawn_concurrency < 1:
            raise InvalidSetting("pool_idle_sec must be positive, pool_spawn_concurrency >= 1")

    @property
    def enabled(self) -> bool:
        """True unless the pool is off (or may hold no slot)."""
        return self.mode != "off" and (self.max_slots > 0 or self.mode == "always")

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        default_mode: str = "auto",
        **given: Any,
    ) -> PoolConfig:
        """``given`` fields, the rest from ``GITPILOT_SANDBOX_POOL[_MAX]``, else defaults.

        ``default_mode`` is the mode when neither ``given`` nor the environment sets one
        (the CLI's one-shot commands: ``off``, a pool would outlive its only run).
        """
        env = os.environ if environ is None else environ
        mode = env.get(POOL_ENV, "").strip().lower()
        given.setdefault("mode", mode or default_mode)
        raw = env.get(POOL_MAX_ENV, "").strip()
        if raw and "max_slots" not in given:
            try:
                given["max_slots"] = int(raw)
            except ValueError:
                raise InvalidSetting(f"{POOL_MAX_ENV} must be a number, got {raw!r}") from None
        raw = env.get(PRESTART_ENV, "").strip().lower()
        if raw and "prestart" not in given:
            if raw not in ("0", "1", "true", "false", "yes", "no", "on", "off"):
                raise InvalidSetting(f"{PRESTART_ENV} must be 1 or 0, got {raw!r}")
            given["prestart"] = raw in ("1", "true", "yes", "on")
        if given.get("max_slots", cls.max_slots) < given.get("min_slots", cls.min_slots):
            given["min_slots"] = given.get("max_slots", cls.max_slots)
        return cls(**given)


@dataclass(frozen=True)
class PoolKey:
    """Everything a slot's launch is made from: a run takes only a slot of its own key."""

    language: str
    interpreter: str
    allow_network: bool
    limits: ResourceLimits
    env: tuple[tuple[str, str], ...]
    #: True: stdin is a pipe the run's text is fed into; False: ``/dev/null``.
    stdin: bool
