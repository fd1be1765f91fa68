"""SandboxApp: the jupyter_server extension that mounts the sandbox REST API.

It builds ONE :class:`SandboxService` from its traitlets config (rooted at the
server's ``root_dir``, auditing through the server's event logger) and keeps it
in the web app's settings under ``gitpilot_sandbox_service``, where handlers
and other extensions reach it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Bool, Float, Int, List, TraitError, Type, Unicode, default

from ..sandbox.batch.cluster import cluster_option
from ..sandbox.errors import InvalidSetting
from ..sandbox.inputs import MAX_INPUT_BYTES, MAX_INPUT_FILES
from ..sandbox.local.isolation import ISOLATION_CHOICES, Isolator
from ..sandbox.local.layered import default_isolator
from ..sandbox.local.pool import POOL_ENV, POOL_MAX_ENV, PRESTART_ENV, PoolConfig
from ..sandbox.matrixlab.config import RUNNER_MAX_WORKSPACE_MB, LifecycleConfig, check_workspace_mb
from ..sandbox.outfiles import DEFAULT_MAX_OUT_BYTES, DEFAULT_MAX_OUT_FILES, OutCaps
from ..sandbox.plans import APPROVAL_TTL_SEC, PlanStore
from ..sandbox.policy import ENV_LISTS, SandboxPolicy, admin_names, env_list
from ..sandbox.service import SandboxService
from ..sandbox.service.authority import SettingsAuthority
from ..sandbox.service.capacity import (
    MIN_RUNS,
    RESERVE_FRACTION,
    RESERVE_MB,
    RUNS_PER_CORE,
    CapacityLimits,
    capacity_limits,
)
from ..sandbox.settings import (
    ALLOWED_BACKENDS_ENV,
    BACKENDS,
    DEFAULT_ALLOWED_BACKENDS,
    MAX_TIMEOUT_SEC,
    SettingsStore,
    allowed_backends_from_env,
)
from . import batch, files, handlers, matrixlab, run, schemas, sessions
from .agents import agent_handlers
from .audit import make_audit_hook
from .base import SERVICE_KEY
from .batch import BATCH_CLUSTER_KEY
from .stream import STREAM_LIMITS_KEY, StreamLimits

API = "/api/sandbox"


class SandboxApp(ExtensionApp):
    """The sandbox REST API under ``/api/sandbox`` (plan -> approve -> run, status, config)."""

    name = "gitpilot_jupyter"
    description = "A safe code sandbox for Jupyter: plan, approve and run snippets."

    require_approval = Bool(
        None,
        allow_none=True,
        help=(
            "Whether every run needs an approval token from /api/sandbox/approve. "
            "Unset: the environment decides (GITPILOT_SANDBOX_REQUIRE_APPROVAL=0 turns it "
            "off, anything else keeps it on). Turn it off only on a trusted single-user server."
        ),
    ).tag(config=True)

    allowed_backends = List(
        Unicode(),
        help=(
            "The sandbox backends users may choose (subset of 'subprocess', 'matrixlab', "
            "'off'). Unset: $" + ALLOWED_BACKENDS_ENV + f", else {list(DEFAULT_ALLOWED_BACKENDS)}. "
            "'off' runs snippets unisolated, as the server's user: list it only on a "
            "single-user server whose user accepts that."
        ),
    ).tag(config=True)

    settings_owners = List(
        Unicode(),
        help=(
            "Where the identity provider has real users (JupyterHub, a custom provider): "
            "the users who may change the sandbox settings, which apply to every run on "
            "this server. Others read them; a change gets 403 setting_not_allowed. Unset: "
            "the user the server runs for ($JUPYTERHUB_USER), else none. Under "
            "jupyter_server's token or password every caller is the one token holder."
        ),
    ).tag(config=True)

    user_may_weaken = Bool(
        None,
        allow_none=True,
        help=(
            "Whether the settings' owners may save a change that weakens a wall for every "
            "run: allow_network true. Unset: yes under a token or password (one principal), "
            "no where identities are real. 'off' is allowed by allowed_backends, a longer "
            "timeout by max_timeout_sec; never by a caller's confirm."
        ),
    ).tag(config=True)

    max_timeout_sec = Int(
        MAX_TIMEOUT_SEC,
        help=f"The longest timeout a snippet may ask for, in seconds (1..{MAX_TIMEOUT_SEC}).",
    ).tag(config=True)

    max_input_bytes = Int(
        MAX_INPUT_BYTES,
        help="The bytes a run's inputs (--input, the 'inputs' field) may hold together "
        f"(default {MAX_INPUT_BYTES}); 0: no inputs. Plans show the cap.",
    ).tag(config=True)
    max_input_files = Int(
        MAX_INPUT_FILES,
        help="The regular files a run's inputs may hold together, folders' files counted "
        f"(default {MAX_INPUT_FILES}); 0: no inputs. Plans show the cap.",
    ).tag(config=True)
    max_out_files = Int(
        DEFAULT_MAX_OUT_FILES,
        help="How many files of a run's out/ folder come back with its result (the rest "
        "is left out, and the result says so). Each plan shows the caps.",
    ).tag(config=True)
    max_out_bytes = Int(
        DEFAULT_MAX_OUT_BYTES,
        help="How many bytes of a run's out/ folder come back, all files together; a file "
        "past the cap is left out, and the result says so.",
    ).tag(config=True)

    # The server variables a run receives: the administrator's lists (policy.ENV_LISTS).
    env_passthrough = List(
        Unicode(),
        help="Names of the server's environment variables every run receives (besides PATH, "
        "locale, TZ and TERM; nothing else of the server's environment reaches a snippet). "
        f"Adds to {ENV_LISTS['env_passthrough']}. Each plan shows them. The product's own "
        "secrets (GITPILOT_*, Jupyter and hub tokens) are refused at start.",
    ).tag(config=True)
    env_allowlist = List(
        Unicode(),
        help="Names of the server's environment variables a caller may pass to a run by "
        "name (the 'env' field, --env NAME); empty: none, a caller naming one is refused. "
        f"Adds to {ENV_LISTS['env_allowlist']}. Agents use agent_env_allowlist instead. "
        "The plan shows each passed name as a [!!] line.",
    ).tag(config=True)
    agent_env_allowlist = List(
        Unicode(),
        help="Names of the server's environment variables an agent (agent/plan, the agent "
        "tools, jupyter sandbox mcp) may pass by name; empty: none. "
        f"Adds to {ENV_LISTS['agent_env_allowlist']}.",
    ).tag(config=True)

    def build_env_lists(self) -> dict[str, frozenset[str]]:
        """Each env list: its trait and its environment variable.

        A bad name or a product secret raises :class:`TraitError` here, when the service
        is built, so the extension does not load at all. (A ``@validate`` would refuse the
        value while the config loads, and jupyter_server would go on with every trait of
        this app at its default.)
        """
        try:
            return {
                key: env_list(key) | admin_names(getattr(self, key), setting=key)
                for key in ENV_LISTS
            }
        except InvalidSetting as exc:
            raise TraitError(exc.message) from None

    settings_dir = Unicode(
        "",
        help=(
            "The folder of settings.json. Empty: $GITPILOT_CONFIG_DIR, else ~/.gitpilot "
            "(shared with GitPilot, whose own keys are preserved)."
        ),
    ).tag(config=True)

    plan_ttl_sec = Float(
        float(APPROVAL_TTL_SEC),
        help="How long an approval token stays valid, in seconds.",
    ).tag(config=True)

    isolation = Unicode(
        "",
        help=(
            "The containment engine of the subprocess backend: 'auto' (bubblewrap, else the "
            "namespace-free Landlock engine, plus cgroups or rlimits), 'bwrap', 'landlock', "
            "'unshare' or 'none' (no file-system wall: refused unless allow_uncontained). "
            "Empty: $GITPILOT_SANDBOX_ISOLATION, else 'auto'."
        ),
    ).tag(config=True)

    allow_uncontained = Bool(
        None,
        allow_none=True,
        help=(
            "Accept subprocess runs this host cannot contain (no bubblewrap and no "
            "Landlock engine works here, or network on would share the host's network). "
            "Refused by default; accepted, every such plan carries a high-severity warning "
            "and the result says 'uncontained'. Unset: $GITPILOT_SANDBOX_ALLOW_UNCONTAINED=1 "
            "accepts them."
        ),
    ).tag(config=True)

    cgroup_parent = Unicode(
        "",
        help=(
            "A cgroup delegated to the server's user that each run's cgroup (memory and "
            "process caps) is made under: a path below each hierarchy's root, e.g. "
            "'/gitpilot-alice' (cgroup v1: /sys/fs/cgroup/memory/gitpilot-alice and "
            ".../pids/gitpilot-alice, owned by the user). Empty: $GITPILOT_SANDBOX_CGROUP, "
            "else the server's own cgroup (root, or a server started in a delegated one)."
        ),
    ).tag(config=True)

    pool = Unicode(
        "",
        help=(
            "The warm pool of the subprocess backend: 'auto' (sandboxes started ahead of "
            "their code, with the same isolation, where bubblewrap runs), 'off' (every run "
            "starts cold), 'always' (every run through a slot, a miss waits for one; for "
            f"tests). Empty: ${POOL_ENV}, else 'auto'."
        ),
    ).tag(config=True)

    pool_max_slots = Int(
        None,
        allow_none=True,
        help=(
            "The most sandboxes kept started and waiting, all kinds together (each holds "
            "two sleeping processes, a cgroup and an empty tmpfs; see the pool page for the "
            f"memory one costs). Unset: ${POOL_MAX_ENV}, else {PoolConfig.max_slots}."
        ),
    ).tag(config=True)

    pool_min_slots = Int(
        PoolConfig.min_slots,
        help="Sandboxes kept waiting for each kind of run in use (language, network, limits, "
        "environment), whatever the demand; more follow the peak of runs at once.",
    ).tag(config=True)

    pool_idle_sec = Float(
        PoolConfig.idle_sec,
        help="A waiting sandbox older than this, or a kind of run unused this long, is "
        "retired (seconds).",
    ).tag(config=True)

    pool_prewarm = List(
        Unicode(),
        default_value=["python"],
        help="Languages whose sandboxes the pool starts when the server starts (for a run "
        "with the settings as they are then), so the first run is warm too. Empty: none "
        "before the first run of each kind.",
    ).tag(config=True)

    pool_spawn_concurrency = Int(
        PoolConfig.spawn_concurrency,
        help="How many sandboxes the pool starts at once, in worker threads (a start is a "
        "short burst of work on one core: this caps what refilling takes from runs).",
    ).tag(config=True)

    pool_prestart = Bool(
        None,
        allow_none=True,
        help="Start a waiting python sandbox's interpreter too, so a warm run pays no "
        "interpreter start-up (the snippet still runs as python inline.py would; see the "
        f"pool page). Unset: ${PRESTART_ENV} (1 or 0), else on.",
    ).tag(config=True)

    matrixlab_runner_image = Unicode(
        LifecycleConfig.runner_image,
        help="Docker image of the MatrixLab Runner that Install pulls and Start runs "
        "($GITPILOT_MATRIXLAB_RUNNER_IMAGE wins).",
    ).tag(config=True)

    matrixlab_sandbox_images = List(
        Unicode(),
        default_value=list(LifecycleConfig.sandbox_images),
        help="Per-language sandbox images Install pulls ($GITPILOT_MATRIXLAB_SANDBOX_IMAGES wins).",
    ).tag(config=True)

    matrixlab_container_name = Unicode(
        LifecycleConfig.container_name,
        help="Name of the Runner container; Start is idempotent by this name "
        "($GITPILOT_MATRIXLAB_CONTAINER wins).",
    ).tag(config=True)

    matrixlab_host_port = Int(
        0,
        help="Host port published for the Runner's port 8000; 0 = the port of matrixlab_url "
        "($GITPILOT_MATRIXLAB_PORT wins).",
    ).tag(config=True)

    matrixlab_jobs_dir = Unicode(
        "",
        help="Jobs folder mounted at the same path inside and outside the Runner; empty = "
        "<settings folder>/matrixlab-jobs ($GITPILOT_MATRIXLAB_JOBS_DIR wins).",
    ).tag(config=True)

    matrixlab_restart_policy = Unicode(
        LifecycleConfig.restart_policy,
        help="Docker restart policy of the Runner container ($GITPILOT_MATRIXLAB_RESTART wins).",
    ).tag(config=True)

    matrixlab_network_isolated = Bool(
        False,
        help="The MatrixLab Runner gives network-on runs a network of their own (egress only: "
        "not the host's addresses, the Docker bridge or the Runner's API). Until an "
        "administrator says so, network-on runs on the matrixlab backend are refused in the "
        "plan ($GITPILOT_MATRIXLAB_NETWORK_ISOLATED wins).",
    ).tag(config=True)

    matrixlab_max_workspace_mb = Int(
        RUNNER_MAX_WORKSPACE_MB,
        help="The largest folder a matrixlab file run sends to the Runner, in MiB (1 to the "
        "Runner's own 500); a larger one is refused before anything is sent "
        "($GITPILOT_MATRIXLAB_MAX_WORKSPACE_MB wins).",
    ).tag(config=True)

    batch_cluster = Unicode(
        "",
        help="Where POST /api/sandbox/batch runs items: empty = on this server's machine "
        "(one run per core); a Dask scheduler address reached with mutual TLS "
        "(tls://host:8786, see batch_tls_*) = as tasks on that cluster, whose worker nodes "
        "run them with their own local sandbox; 'local' = a Dask LocalCluster on loopback "
        "started per batch. A plain tcp:// address is refused (cluster_insecure).",
    ).tag(config=True)

    batch_tls_ca_file = Unicode(
        "", help="The certificate authority of batch_cluster's TLS (empty: Dask's settings)."
    ).tag(config=True)

    batch_tls_cert = Unicode(
        "", help="The server's certificate for batch_cluster's mutual TLS (empty: Dask's)."
    ).tag(config=True)

    batch_tls_key = Unicode(
        "", help="Its private key, when not in the batch_tls_cert file (empty: Dask's)."
    ).tag(config=True)

    # -- capacity: the caps on runs under way and on what a stream may cost ------------

    max_concurrent_runs = Int(
        None,
        allow_none=True,
        help="The most runs under way on this server at once, all users and faces together "
        f"(REST, cells, agents, batch items); one more is refused 429 busy with Retry-After. "
        f"Unset: {RUNS_PER_CORE} per usable core, at least {MIN_RUNS}.",
    ).tag(config=True)

    max_runs_per_user = Int(
        None,
        allow_none=True,
        help="The most runs under way for one identity of an identity provider with users "
        "(the token's one principal has max_concurrent_runs). Unset: half of "
        "max_concurrent_runs.",
    ).tag(config=True)

    memory_budget_mb = Int(
        None,
        allow_none=True,
        help="The memory (MiB) the limits of the runs under way on this host may add up to; "
        "a run that would pass it is refused 429 busy (one run alone always starts). Unset: "
        f"the host's memory (or the server's cgroup's) less max({RESERVE_MB} MiB, "
        f"{RESERVE_FRACTION:.1%}). 0: no memory cap.",
    ).tag(config=True)

    max_batch_workers = Int(
        None,
        allow_none=True,
        help="The most items of a batch at a time; a batch asking more 'workers' runs this "
        "many. Unset: max_concurrent_runs.",
    ).tag(config=True)

    stream_buffer_bytes = Int(
        StreamLimits.buffer_bytes,
        help="Bytes of NDJSON lines a client may leave unread before the run's output waits "
        "for it.",
    ).tag(config=True)

    stream_stall_sec = Float(
        StreamLimits.stall_sec,
        help="Seconds an NDJSON stream may go with lines unread and none taken before it "
        "is closed and its run stopped.",
    ).tag(config=True)

    def build_capacity(self) -> CapacityLimits:
        """The caps on runs under way, from the traits above."""
        try:
            return capacity_limits(
                self.max_concurrent_runs,
                self.max_runs_per_user,
                self.memory_budget_mb,
                self.max_batch_workers,
            )
        except InvalidSetting as exc:
            raise TraitError(exc.message) from None

    def build_stream_limits(self) -> StreamLimits:
        """What a client that stops reading an NDJSON stream may cost."""
        if self.stream_buffer_bytes < 1 or self.stream_stall_sec <= 0:
            raise TraitError("stream_buffer_bytes and stream_stall_sec must be positive")
        return StreamLimits(self.stream_buffer_bytes, self.stream_stall_sec)

    service_class = Type(
        default_value=SandboxService,
        klass=SandboxService,
        help="The SandboxService class to build (a subclass may add policy or backends).",
    ).tag(config=True)

    @default("allowed_backends")
    def _default_backends(self) -> list[str]:
        return list(allowed_backends_from_env())

    @default("settings_owners")
    def _default_owners(self) -> list[str]:
        hub_user = os.environ.get("JUPYTERHUB_USER", "").strip()
        return [hub_user] if hub_user else []

    def check_traits(self) -> None:
        """Refuse a bad ``allowed_backends``, ``isolation``, ``max_timeout_sec``,
        ``plan_ttl_sec``, input or out/ cap, and normalise ``isolation``.

        Called when the service is built, so a bad value stops the extension from loading.
        (A ``@validate`` would refuse it while the config loads, and jupyter_server would go
        on with every trait of this app at its default: one typo would quietly undo the
        administrator's whole configuration.)
        """
        backends = list(self.allowed_backends)
        unknown = sorted(set(backends) - set(BACKENDS))
        if unknown or not backends:
            raise TraitError(
                f"allowed_backends must be a non-empty subset of {list(BACKENDS)}, got {backends}"
            )
        isolation = str(self.isolation).strip().lower()
        if isolation and isolation not in ISOLATION_CHOICES:
            raise TraitError(
                f"isolation must be one of {list(ISOLATION_CHOICES)}, got {self.isolation!r}"
            )
        self.isolation = isolation
        if not 1 <= int(self.max_timeout_sec) <= MAX_TIMEOUT_SEC:
            raise TraitError(f"max_timeout_sec must be between 1 and {MAX_TIMEOUT_SEC}")
        if float(self.plan_ttl_sec) <= 0:
            raise TraitError("plan_ttl_sec must be positive")
        for name in ("max_input_bytes", "max_input_files", "max_out_files", "max_out_bytes"):
            if int(getattr(self, name)) < 0:
                raise TraitError(f"{name} must be 0 or more")

    def build_isolator(self) -> Isolator:
        """The subprocess backend's isolator, as the ``isolation`` and ``cgroup_parent``
        traits ask."""
        if not self.isolation and not self.cgroup_parent and self.allow_uncontained is None:
            return default_isolator()
        from ..sandbox.local.layered import LayeredIsolator

        return LayeredIsolator(
            self.isolation or None,
            cgroup_parent=self.cgroup_parent or None,
            allow_uncontained=self.allow_uncontained,
        )

    def build_pool_config(self) -> PoolConfig:
        """The warm pool's limits from the ``pool*`` traits (the environment where unset)."""
        given: dict[str, Any] = {
            "min_slots": self.pool_min_slots,
            "idle_sec": self.pool_idle_sec,
            "spawn_concurrency": self.pool_spawn_concurrency,
        }
        if self.pool:
            given["mode"] = self.pool.strip().lower()
        if self.pool_max_slots is not None:
            given["max_slots"] = self.pool_max_slots
        if self.pool_prestart is not None:
            given["prestart"] = self.pool_prestart
        try:
            return PoolConfig.from_env(**given)
        except InvalidSetting as exc:
            raise TraitError(exc.message) from None

    def build_lifecycle_config(self) -> LifecycleConfig:
        """The Runner lifecycle config from the ``matrixlab_*`` traits (env applies per call).

        A bad ``matrixlab_max_workspace_mb`` raises :class:`TraitError` (see :meth:`check_traits`).
        """
        try:
            check_workspace_mb(self.matrixlab_max_workspace_mb)
        except InvalidSetting as exc:
            raise TraitError(exc.message) from None
        return LifecycleConfig(
            runner_image=self.matrixlab_runner_image,
            sandbox_images=tuple(self.matrixlab_sandbox_images),
            container_name=self.matrixlab_container_name,
            host_port=self.matrixlab_host_port or None,
            jobs_dir=self.matrixlab_jobs_dir,
            restart_policy=self.matrixlab_restart_policy,
            network_isolated=self.matrixlab_network_isolated,
            max_workspace_mb=self.matrixlab_max_workspace_mb,
        )

    def build_service(self) -> SandboxService:
        """The one service of this server, configured from the traits above."""
        assert self.serverapp is not None
        self.check_traits()
        env_lists = self.build_env_lists()
        service: SandboxService = self.service_class(
            isolator=self.build_isolator(),
            pool=self.build_pool_config(),
            capacity=self.build_capacity(),
            lifecycle_config=self.build_lifecycle_config(),
            settings=SettingsStore(self.settings_dir or None),
            policy=SandboxPolicy(
                max_timeout_sec=self.max_timeout_sec,
                max_input_bytes=self.max_input_bytes,
                max_input_files=self.max_input_files,
                allowed_vars=env_lists["env_passthrough"],
                caller_vars=env_lists["env_allowlist"],
                agent_vars=env_lists["agent_env_allowlist"],
                out_caps=OutCaps(self.max_out_files, self.max_out_bytes),
            ),
            plans=PlanStore(ttl_sec=self.plan_ttl_sec),
            require_approval=self.require_approval,
            allowed_backends=self.allowed_backends,
            authority=SettingsAuthority.for_server(self.settings_owners, self.user_may_weaken),
            root_dir=self.serverapp.root_dir,
            audit=make_audit_hook(self.serverapp.event_logger, self.log),
        )
        return service

    def initialize_settings(self) -> None:
        """Build the service and share it through the web app's settings."""
        # The request schemas are read beside the start-up, not by the first request.
        threading.Thread(target=schemas.prepare, name="gitpilot-schemas", daemon=True).start()
        self.service = self.build_service()
        warmed = self.service.prewarm(self.pool_prewarm)
        if warmed:
            self.log.info("gitpilot sandbox: warm pool started for %s", ", ".join(warmed))
        self.settings[SERVICE_KEY] = self.service
        self.settings[STREAM_LIMITS_KEY] = self.build_stream_limits()
        self.settings[BATCH_CLUSTER_KEY] = cluster_option(
            self.batch_cluster, self.batch_tls_ca_file, self.batch_tls_cert, self.batch_tls_key
        )

    def initialize_handlers(self) -> None:
        """Mount one handler per resource under ``/api/sandbox``."""
        self.handlers.extend(
            [
                (f"{API}/status", handlers.StatusHandler),
                (f"{API}/config", handlers.ConfigHandler),
                (f"{API}/plan", handlers.PlanHandler),
                (f"{API}/plans", handlers.PlansHandler),
                (f"{API}/approve", handlers.ApproveHandler),
                *agent_handlers(API),
                (f"{API}/run", run.RunHandler),
                (f"{API}/plan-and-run", run.PlanAndRunHandler),
                (f"{API}/batch/plan", batch.BatchPlanHandler),
                (f"{API}/batch/approve", batch.BatchApproveHandler),
                (f"{API}/batch", batch.BatchRunHandler),
                (f"{API}/runs/(?P<run_id>[^/]+)/files/(?P<name>.+)", files.RunFileHandler),
                (f"{API}/runs/(?P<run_id>[^/]+)", run.RunCancelHandler),
                (f"{API}/sessions", sessions.SessionsHandler),
                (f"{API}/sessions/(?P<name>[^/]+)", sessions.SessionHandler),
                (f"{API}/sessions/(?P<name>[^/]+)/restart", sessions.SessionRestartHandler),
                (f"{API}/sessions/(?P<name>[^/]+)/interrupt", sessions.SessionInterruptHandler),
                (f"{API}/matrixlab/test", matrixlab.ConnectionTestHandler),
                (f"{API}/matrixlab/lifecycle", matrixlab.LifecycleStatusHandler),
                (f"{API}/matrixlab/(install|start|stop)", matrixlab.LifecycleActionHandler),
            ]
        )

    async def stop_extension(self) -> None:
        """Stop the service's sessions and release its backend resources."""
        service: SandboxService | None = getattr(self, "service", None)
        if service is not None:
            await service.aclose()
