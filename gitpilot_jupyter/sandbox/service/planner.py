"""Planning: the one definition of a run (:class:`~.spec.RunSpec`) and the plan that describes it.

A part of :class:`~gitpilot_jupyter.sandbox.service.service.SandboxService` (held, not
inherited). It builds specs and plans; keeping, approving and running them is
the service's (see :mod:`.workflow` and :mod:`.runs`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..errors import EmptyCode, InvalidRequest, SessionUnavailable
from ..files import read_under_root
from ..inputs import InputCaps, RunInput, resolve_inputs
from ..languages import (
    Interpreters,
    canonical_language,
    language_for_path,
    plain_filename,
    run_filename,
)
from ..local.confine import inside, needed_paths
from ..local.isolation import UNCONTAINED_LAYER
from ..local.namespaces import credential_paths
from ..local.off import OFF_HOME_CHECK, OFF_NETWORK_CHECK, OFF_WARNING, is_off, network_for
from ..outfiles import plan_check as out_check
from ..plans import SOURCES, ExecutionPlan, PlanStore, new_plan_id
from ..policy import SandboxPolicy, destructive_label
from ..records import Check, PlanWarning
from ..request import RunOptions
from ..rich import NOT_ON_MATRIXLAB
from ..scan import scan
from ..sessions.boot import RESERVED_NAMES as SESSION_NAMES
from ..sessions.boot import engine_refusal
from ..settings import SettingsStore
from ..spec import RunSpec
from ..text import check_text
from .resolver import BackendResolver, limits_of

MAX_CODE_CHARS = 1_000_000

#: What a walled run cannot see of this host's files (the plan's home check says whether).
HOME_AND_SECRETS = "your home folder, ~/.ssh and the server's secret files"
#: The same where the interpreter lives in the home folder: its folder is seen, read-only.
HOME_BUT_INTERPRETER = (
    "your home folder (all but the interpreter's folder, read-only), ~/.ssh and the "
    "server's secret files"
)
#: The home check's passing labels, each with what it says the run cannot reach.
HOME_HIDDEN_CHECKS = {
    f"{HOME_AND_SECRETS} hidden": HOME_AND_SECRETS,
    f"{HOME_BUT_INTERPRETER} hidden": HOME_BUT_INTERPRETER,
    f"{HOME_AND_SECRETS} not in the run's container": HOME_AND_SECRETS,
}


class Planner:
    """Builds the run spec and the plan (checks, warnings, digest) for a request."""

    def __init__(
        self,
        *,
        settings: SettingsStore,
        resolver: BackendResolver,
        interpreters: Interpreters,
        plans: PlanStore,
        policy: Callable[[], SandboxPolicy],
        require_approval: Callable[[], bool],
        root_dir: Path | None,
    ) -> None:
        self.settings = settings
        self.resolver = resolver
        self.interpreters = interpreters
        self.plans = plans
        #: The service's policy and approval switch, read at each call (both may change).
        self._policy = policy
        self._require_approval = require_approval
        self.root_dir = root_dir

    def spec(
        self,
        options: RunOptions,
        *,
        code: str | None = None,
        agent: bool = False,
        inputs: tuple[RunInput, ...] | None = None,
    ) -> RunSpec:
        """The one definition of a run: what planning describes and a long-form run checks.

        Canonical language, the timeout clamped by the policy (the settings' default
        within the server's maximum), network and backend resolved from the settings,
        the server variables passed through (``env``: names on the administrator's
        allowlist, the agents' one for ``agent``), the inputs (resolved and hashed, unless
        ``inputs`` holds them already: :meth:`inputs_of`), the resource limits in force
        and, for a file run, the file. Raises the typed error of the first bad field.
        ``code`` is the text to run when it is not ``options.code`` (a file's).
        """
        name, effective = self.resolver.resolve(options.backend)
        settings = effective.settings
        asked = options.allow_network
        requested = settings.allow_network if asked is None else bool(asked)
        text = options.code if code is None else code
        if options.language is None or text is None:
            raise InvalidRequest("language and code are required", code="missing_field")
        return RunSpec(
            language=canonical_language(options.language),
            code=text,
            stdin=options.stdin,
            timeout_sec=self._policy().timeout(options.timeout_sec, settings.timeout_sec),
            network=network_for(name, requested),  # off: the host's network, whatever was asked
            backend=name,
            env=self._policy().caller_env(options.env, agent=agent),
            limits=limits_of(settings),
            file=options.file,
            # Only a plain name: every backend runs the code under it as it is.
            filename=None if options.file is not None else plain_filename(options.filename),
            session=options.session,
            inputs=self.inputs_of(options) if inputs is None else inputs,
        )

    def inputs_of(self, options: RunOptions) -> tuple[RunInput, ...]:
        """The inputs ``options`` names, under the root folder (the cwd when none), sized
        and hashed under the policy's caps; their names may not take the snippet's
        (blocking: a face calls it in a worker thread)."""
        if not options.inputs:
            return ()
        if options.language is not None:
            language = canonical_language(options.language)
        elif options.file is not None:
            language = language_for_path(options.file)
        else:
            raise InvalidRequest("language is required", code="missing_field")
        dirs, files = credential_paths(os.environ, Path.home())
        return resolve_inputs(
            self.root_dir or Path.cwd().resolve(),
            options.inputs,
            # A session's folder holds its own files too (its inbox, packages, kernel's).
            reserved=[
                run_filename(language, options.file or options.filename),
                *(SESSION_NAMES if options.session is not None else ()),
            ],
            hidden=[*dirs, *files],
            caps=self._policy().input_caps,
        )

    def _check_session(self, backend: str) -> None:
        """Refuse a session's cell where no session can be held (another backend, an
        engine without a mount namespace of its own): at plan time, before anyone is
        asked to approve a cell that could not run."""
        local = self.resolver.subprocess
        if backend != local.name:
            raise SessionUnavailable(
                f"sessions run on the {local.name} backend, not {backend}: plan the cell "
                f"with backend {local.name}"
            )
        refused = engine_refusal(local.isolator.engine)
        if refused is not None:
            raise refused

    def read_file(self, file: str) -> str:
        """The text of ``file`` under the root folder (the cwd when none); nothing outside it."""
        return read_under_root(self.root_dir or Path.cwd().resolve(), file)

    def describe(
        self,
        options: RunOptions,
        *,
        session_id: str | None = None,
        file_text: str | None = None,
        agent: bool = False,
        inputs: tuple[RunInput, ...] | None = None,
    ) -> ExecutionPlan:
        """The plan for a request, neither kept nor audited (a batch plans its items with it;
        :meth:`.service.SandboxService.plan` keeps it). ``file_text`` is ``options.file``'s
        content and ``inputs`` its inputs (:meth:`inputs_of`) when the caller has read them
        already; ``agent``: an agent's request (its own ``env`` allowlist).
        """
        spec = self._requested_spec(options, file_text, agent=agent, inputs=inputs)
        lang, code, file, source = spec.language, spec.code, spec.named_after, options.source
        name, names, timeout, network = spec.backend, spec.env, spec.timeout_sec, spec.network
        runner = self.resolver.backend(name)
        refused = runner.refusal(allow_network=network)
        if refused is not None:
            raise refused  # before anyone is asked to approve what cannot be contained
        if spec.session is not None:
            self._check_session(name)
        command = runner.display_command(lang, file) or self.resolver.command(lang)
        blocked_label = destructive_label(lang, code, command)
        checks: list[Check] = [
            {"label": f"language {lang} is supported", "ok": True},
            # The label says what was found: "[!!] no destructive pattern" read as a pass.
            {
                "label": f"destructive pattern {blocked_label!r} found"
                if blocked_label
                else "no destructive pattern",
                "ok": blocked_label is None,
            },
            {
                "label": f"timeout {timeout} s within 1..{self._policy().max_timeout_sec}",
                "ok": True,
            },
            self._network_off_check(name)
            if not network
            else {"label": network_label(name, network), "ok": False},
            self._home_check(name, lang),
        ]
        if name in self.resolver.local:
            found = self.interpreters.resolve(lang) is not None
            checks.insert(1, {"label": f"{command[0]} interpreter installed", "ok": found})
        checks.append(
            {"label": spec.limits.display.describe(), "ok": True}
            if name in self.resolver.local
            else {"label": NOT_ON_MATRIXLAB, "ok": False}
        )
        checks += [{"label": note, "ok": False} for note in runner.limit_notes(spec.limits)]
        warnings = [OFF_WARNING.copy()] if is_off(name) else []
        if name == "subprocess":
            checks.append(self._disk_check(spec.limits.disk_mb))
            if network:
                checks.append(self._network_check())
            more_checks, more_warnings = self._containment_notes(network)
            checks += more_checks
            warnings += more_warnings
        checks += env_checks(names, self._policy().allowed_vars)
        # bubblewrap binds the copies read-only; elsewhere the run could change its copy.
        bound = name == "subprocess" and self.resolver.subprocess.isolator.engine == "bwrap"
        in_session = spec.session is not None
        checks += input_checks(
            spec.inputs, self._policy().input_caps, read_only=bound, session=in_session
        )
        checks.append(
            out_check(
                name,
                self._policy().out_caps,
                collected=runner.hands_back_files(),
                session=in_session,
            )
        )
        lines = code.count("\n") + (0 if code.endswith("\n") else 1)
        size = f"{lines} line{'s' * (lines != 1)}"
        if spec.session is not None:  # every face shows the goal: it names the session
            goal = f"Run a {lang} cell ({size}) in session {spec.session}"
        else:
            goal = f"Run {file}" if file else f"Run a {lang} snippet ({size})"
        return ExecutionPlan(
            plan_id=new_plan_id(),
            goal=goal,
            source="file_run" if spec.file and source == "api" else source,
            spec=spec,
            command=command,
            checks=checks,
            warnings=warnings + scan(lang, code),
            blocked=blocked_label is not None,
            blocked_reason=f"destructive pattern {blocked_label!r}" if blocked_label else None,
            requires_approval=self._require_approval(),
            digest=spec.digest,
            created_at=self.plans.clock(),
            session_id=session_id,
        )

    def _requested_spec(
        self,
        options: RunOptions,
        file_text: str | None,
        *,
        agent: bool = False,
        inputs: tuple[RunInput, ...] | None = None,
    ) -> RunSpec:
        """The spec of a request to plan, its fields checked first: the source, code or a
        file (read unless ``file_text`` is its text), the language, the text itself."""
        language, code, file = options.language, options.code, options.file
        source, stdin = options.source, options.stdin
        if source not in SOURCES:
            raise InvalidRequest(f"unknown source {source!r}; expected one of {list(SOURCES)}")
        if file is not None:
            if code is not None:
                raise InvalidRequest("give either code or file, not both")
            code = self.read_file(file) if file_text is None else file_text
            lang = canonical_language(language) if language else language_for_path(file)
        else:
            if language is None:
                raise InvalidRequest("language is required", code="missing_field")
            lang = canonical_language(language)
            if code is None:
                raise InvalidRequest("code is required", code="missing_field")
        check_text("code", code)
        if stdin is not None:
            check_text("stdin", stdin)
        if not code.strip():
            raise EmptyCode("there is no code to run")
        if len(code) > MAX_CODE_CHARS:
            raise InvalidRequest(f"code is longer than {MAX_CODE_CHARS} characters")
        return self.spec(options.but(language=lang), code=code, agent=agent, inputs=inputs)

    def _disk_check(self, disk_mb: int) -> Check:
        """The plan's line on the run's writable space: capped (verified layer) or not."""
        capped = "disk-cap" in self.resolver.subprocess.isolation()
        if capped:
            label = f"writable space capped at {disk_mb} MB"
        else:
            label = "writable space not capped on this host (see jupyter sandbox status)"
        return {"label": label, "ok": capped}

    def _network_off_check(self, backend: str) -> Check:
        """The plan's line on a network-off run: cut off only where the engine verified it."""
        label = network_label(backend, False)
        if backend != "subprocess":
            return {"label": label, "ok": not is_off(backend)}
        layers = self.resolver.subprocess.isolation()
        if "netns" in layers or "net-denied" in layers:
            return {"label": label, "ok": True}
        return {
            "label": "network NOT cut off: this host's engine cannot take it away "
            "(see jupyter sandbox status)",
            "ok": False,
        }

    def _home_check(self, backend: str, language: str) -> Check:
        """The plan's line on the user's home folder, ``~/.ssh`` and the server's secret
        files: hidden only where the engine's file-system wall is in force for this run."""
        if is_off(backend):
            return {"label": OFF_HOME_CHECK, "ok": False}
        if backend != "subprocess":  # matrixlab: a container of its own, no folder of this host
            return {"label": f"{HOME_AND_SECRETS} not in the run's container", "ok": True}
        layers = self.resolver.subprocess.isolation()
        walled = {"fs-allowlist", "hidden-credentials"} <= set(layers)
        if not walled or UNCONTAINED_LAYER in layers:
            return {
                "label": f"{HOME_AND_SECRETS} NOT hidden: this host's engine has no "
                "file-system wall (see jupyter sandbox status)",
                "ok": False,
            }
        interpreter = self.interpreters.resolve(language)
        needed = needed_paths(interpreter) if interpreter else []
        # A credential folder holding the interpreter stays in view (the engines' rule).
        home = Path.home().resolve()
        # The very folders the isolator's runs hide, whichever isolator it is.
        hidden, _ = self.resolver.subprocess.isolator.hidden_paths()
        seen = [d for d in hidden if any(inside(p, d) for p in needed)]
        if seen:
            names = ", ".join(
                f"~/{d.relative_to(home)}" if inside(d, home) else str(d) for d in seen
            )
            return {
                "label": f"{names} NOT fully hidden: it holds the interpreter",
                "ok": False,
            }
        if any(inside(p, home) for p in needed):
            return {"label": f"{HOME_BUT_INTERPRETER} hidden", "ok": True}
        return {"label": f"{HOME_AND_SECRETS} hidden", "ok": True}

    def _containment_notes(self, network: bool) -> tuple[list[Check], list[PlanWarning]]:
        """What the engine in force cannot keep from this run, shown before approval.

        Runs the administrator accepted uncontained, and memory left uncapped, are
        high-severity warnings; the engine's other gaps are failed checks.
        """
        isolator = self.resolver.subprocess.isolator
        checks: list[Check] = []
        warnings: list[PlanWarning] = []
        refusal = isolator.refusal()
        if refusal is not None:  # only here when the administrator accepted it
            warnings.append(
                {
                    "severity": "high",
                    "label": "this host cannot keep the snippet away from your files",
                    "detail": refusal["reason"],
                }
            )
        elif network and (net := isolator.refusal(allow_network=True)) is not None:
            warnings.append(
                {
                    "severity": "high",
                    "label": "network on shares the host's network: its loopback, the "
                    "Jupyter API and its services are reachable",
                    "detail": net["reason"],
                }
            )
        for gap in isolator.gaps(allow_network=network):
            if gap["layer"] == "cgroup-memory":
                warnings.append(
                    {
                        "severity": "high",
                        "label": "memory is not capped for the run as a whole",
                        "detail": f"{gap['reason']}. To fix: {gap['fix']}",
                    }
                )
            elif gap["layer"] != "disk-cap":  # the disk line says that one
                checks.append({"label": f"not on this host: {gap['reason']}", "ok": False})
        return checks, warnings

    def _network_check(self) -> Check:
        """The plan's line on a network-on run: its own stack (verified layer) or the host's."""
        if "egress-only" in self.resolver.subprocess.isolation(allow_network=True):
            return {"label": "network on: its own stack, the host not reachable", "ok": True}
        return {
            "label": "network on shares the host's network: its loopback and services are "
            "reachable (see jupyter sandbox status)",
            "ok": False,
        }


def network_label(backend: str, network: bool) -> str:
    """The plan's network line for ``backend``."""
    if is_off(backend):
        return OFF_NETWORK_CHECK
    return "network allowed" if network else "network disabled"


def env_checks(named: Sequence[str], every_run: Iterable[str]) -> list[Check]:
    """The plan's lines on the server variables a run receives: a warning-style failed
    check (``[!!]``) for the names the caller passes, and one for the administrator's
    every-run names that are set; none when nothing of the server's passes.

    A server variable in a snippet is the server's value in code someone else may have
    written: whoever approves should see it, whatever the list that allowed it.
    """
    checks: list[Check] = []
    if named:
        unset = [n for n in named if n not in os.environ]
        label = "passes the server's " + ", ".join(named)
        if unset:
            label += f" (not set on the server: {', '.join(unset)})"
        checks.append({"label": label, "ok": False})
    admin = sorted(n for n in every_run if n in os.environ and n not in named)
    if admin:
        label = f"passes the server's {', '.join(admin)} (the administrator's, to every run)"
        checks.append({"label": label, "ok": False})
    return checks


def input_checks(
    inputs: Sequence[RunInput], caps: InputCaps, *, read_only: bool, session: bool = False
) -> list[Check]:
    """The plan's lines on the files and folders handed to the run: one each (name,
    size, hash), then how the run sees them (``read_only``: bound so; ``session``: in
    the session's folder, where they stay) and the caps; none without inputs."""
    if not inputs:
        return []
    checks: list[Check] = [{"label": one.label(), "ok": True} for one in inputs]
    seen = "read-only copies" if read_only else "copies the run may change"
    where = (
        "the session's folder (kept until the session stops or an input of the same "
        "name replaces them)"
        if session
        else "the run folder"
    )
    label = f"inputs: {seen} in {where}, never the originals; {caps.describe()}"
    checks.append({"label": label, "ok": True})
    return checks
