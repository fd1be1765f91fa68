"""SandboxPolicy: timeouts, output cap, the environment allowlist, destructive patterns."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .errors import InvalidRequest, InvalidSetting, PolicyViolation
from .inputs import MAX_INPUT_BYTES, MAX_INPUT_FILES, InputCaps
from .matrixlab.config import TOKEN_ENV as RUNNER_TOKEN_ENV
from .outfiles import OutCaps
from .output import DEFAULT_OUTPUT_CAP
from .settings import ENV_VARS as SETTINGS_ENV_VARS
from .settings import FIELD_NAMES, MAX_TIMEOUT_SEC, SandboxSettings

#: What a snippet's environment holds by default: nothing of the server's but these
#: (``HOME`` and ``TMPDIR`` are then pointed into the run's own folder by the backend).
BASE_VARS = frozenset(
    {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "NO_COLOR", "PYTHONIOENCODING"}
    | {
        f"LC_{part}"
        for part in (
            "ALL", "CTYPE", "COLLATE", "MESSAGES", "MONETARY", "NUMERIC", "TIME",
            "ADDRESS", "IDENTIFICATION", "MEASUREMENT", "NAME", "PAPER", "TELEPHONE",
        )
    }
)  # fmt: skip
PROXY_VARS = frozenset(
    name
    for base in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY")
    for name in (base, base.lower())
)
#: The administrator's lists for processes without a server trait (CLI, kernel, an
#: in-process agent): comma- or space-separated variable names. Passed to every run:
ENV_PASSTHROUGH_ENV = "GITPILOT_SANDBOX_ENV_PASSTHROUGH"
#: The names a caller may pass by name (``--env NAME``, the ``env`` field); none by default.
ENV_ALLOWLIST_ENV = "GITPILOT_SANDBOX_ENV_ALLOWLIST"
#: The names an agent may pass by name (agent tools, MCP, ``agent/plan``); none by default.
AGENT_ENV_ALLOWLIST_ENV = "GITPILOT_SANDBOX_AGENT_ENV_ALLOWLIST"
#: Each list's server trait (``c.SandboxApp.<trait>``) and environment variable, for messages.
ENV_LISTS = {
    "env_passthrough": ENV_PASSTHROUGH_ENV,
    "env_allowlist": ENV_ALLOWLIST_ENV,
    "agent_env_allowlist": AGENT_ENV_ALLOWLIST_ENV,
}
MAX_ENV_NAMES = 64
#: The server's own credentials: a run holding one could plan and approve its own runs
#: (threat model row 5), so a caller may never pass them through.
SERVER_CREDENTIALS = frozenset(
    {"JUPYTER_TOKEN", "GITPILOT_JUPYTER_TOKEN", "JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN"}
)
#: The environment variables holding a value the settings treat as a secret (the fields
#: :meth:`SandboxSettings.masked` hides), and the MatrixLab Runner's own token variable.
SETTINGS_SECRET_VARS = frozenset(
    var
    for var, key in SETTINGS_ENV_VARS.items()
    if key in set(FIELD_NAMES) - set(SandboxSettings().masked())
) | {RUNNER_TOKEN_ENV}
#: The product's own namespace: its configuration and every token it reads live there.
PRODUCT_PREFIX = "GITPILOT_"
#: Jupyter's and the hub's credentials beyond :data:`SERVER_CREDENTIALS` (OAuth secrets,
#: cookie secrets, crypt keys): any ``JUPYTER*`` / ``JPY_`` name of a secret's kind.
_JUPYTER_SECRET = re.compile(r"(?:JUPYTER|JPY_)\w*(?:TOKEN|SECRET|KEY|PASSWORD)\w*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def never_passed(name: str) -> bool:
    """True for the product's own secrets, which no list and no caller can pass to a run.

    The Jupyter server's and the hub's tokens (:data:`SERVER_CREDENTIALS` and any
    ``JUPYTER*`` secret), the settings' secrets (:data:`SETTINGS_SECRET_VARS`) and the
    whole ``GITPILOT_*`` namespace (the product's configuration and tokens).
    """
    return (
        name in SERVER_CREDENTIALS
        or name in SETTINGS_SECRET_VARS
        or name.startswith(PRODUCT_PREFIX)
        or _JUPYTER_SECRET.fullmatch(name) is not None
    )


def _why_never(names: Iterable[str]) -> str:
    """Why ``names`` (product secrets) never reach a snippet, for a refusal message."""
    shown = ", ".join(sorted(names))
    if any(n in SERVER_CREDENTIALS for n in names):
        return (
            f"{shown}: the Jupyter server's own token; a run holding it could approve its "
            "own plans, so it is never passed to a snippet"
        )
    return f"{shown}: the product's own secret or configuration, never passed to a snippet"


def env_names(names: object) -> tuple[str, ...]:
    """Validate the variable names a caller passes through (``--env NAME``), sorted, unique.

    Raises :class:`InvalidRequest` for anything that is not a list of variable names,
    and for the product's own secrets (:func:`never_passed`). Whether the caller may
    name them is :meth:`SandboxPolicy.caller_env`'s.
    """
    if names is None:
        return ()
    if isinstance(names, str) or not isinstance(names, (list, tuple, set, frozenset)):
        raise InvalidRequest("env must be a list of variable names", code="invalid_env")
    out = set()
    for name in names:
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise InvalidRequest(
                f"env: {name!r} is not a variable name (letters, digits, _; "
                "only names: values are taken from the server's environment)",
                code="invalid_env",
            )
        if never_passed(name):
            raise InvalidRequest(f"env: {_why_never([name])}", code="invalid_env")
        out.add(name)
    if len(out) > MAX_ENV_NAMES:
        raise InvalidRequest(f"env: at most {MAX_ENV_NAMES} names", code="invalid_env")
    return tuple(sorted(out))


def admin_names(names: Iterable[str], *, setting: str) -> frozenset[str]:
    """An administrator's list ``setting`` (a key of :data:`ENV_LISTS`), checked.

    Raises :class:`InvalidSetting` naming the list for a bad name or a product secret:
    an administrator's typo must not pass a token to every snippet, nor fail silently.
    """
    listed = [str(n) for n in names]
    where = f"c.SandboxApp.{setting} / {ENV_LISTS[setting]}"
    bad = [n for n in listed if not _ENV_NAME.fullmatch(n)]
    if bad:
        raise InvalidSetting(f"{where}: {bad[0]!r} is not a variable name")
    secret = [n for n in listed if never_passed(n)]
    if secret:
        raise InvalidSetting(f"{where} lists {_why_never(secret)}; remove it")
    return frozenset(listed)


def env_list(setting: str, environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The names of the environment variable of list ``setting`` (see :func:`admin_names`)."""
    raw = (os.environ if environ is None else environ).get(ENV_LISTS[setting], "")
    return admin_names((n for n in re.split(r"[\s,]+", raw) if n), setting=setting)


def admin_passthrough(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The names in ``GITPILOT_SANDBOX_ENV_PASSTHROUGH``, passed to every run."""
    return env_list("env_passthrough", environ)


# Each pattern is matched with word boundaries so ``rm -rf /tmp/x`` is not refused.
_END = r"(?=$|[\s;&|)`'\"])"
DESTRUCTIVE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "rm -rf /",
        # Recursive and force anywhere among the options (-rf, -r -f, --recursive --force).
        re.compile(
            r"(?<![\w-])rm"
            r"(?=(?:\s+-{1,2}[\w-]+)*?\s+(?:-[a-zA-Z]*[rR][a-zA-Z]*|--recursive)(?=\s))"
            r"(?=(?:\s+-{1,2}[\w-]+)*?\s+(?:-[a-zA-Z]*f[a-zA-Z]*|--force)(?=\s))"
            r"(?:\s+-{1,2}[\w-]+)*\s+/\*?" + _END
        ),
    ),
    ("mkfs", re.compile(r"(?<![\w-])mkfs(?:\.\w+)?" + _END)),
    ("dd if=/dev/zero", re.compile(r"(?<![\w-])dd\s+(?:[^\n;|&]*\s)?if=/dev/zero" + _END)),
    ("fork bomb :(){ :|:& };:", re.compile(r":\s*\(\s*\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:")),
    ("shutdown -h", re.compile(r"(?<![\w-])shutdown\s+(?:-{1,2}[\w-]+\s+)*-[a-zA-Z]*h" + _END)),
    ("shutdown -r", re.compile(r"(?<![\w-])shutdown\s+(?:-{1,2}[\w-]+\s+)*-[a-zA-Z]*r" + _END)),
)


def find_destructive(text: str) -> str | None:
    """The label of the first destructive pattern in ``text``, or None."""
    for label, pattern in DESTRUCTIVE_PATTERNS:
        if pattern.search(text):
            return label
    return None


def destructive_label(language: str, code: str, command: Iterable[str]) -> str | None:
    """The destructive pattern a run would meet: in the command it launches, then (bash)
    in the shell text itself; None when there is none. The plan and the run check this."""
    label = find_destructive(" ".join(command))
    if label is None and language == "bash":
        label = find_destructive(code)
    return label


@dataclass(frozen=True)
class SandboxPolicy:
    """The rules every backend applies; one instance is shared by the service."""

    max_output_bytes: int = DEFAULT_OUTPUT_CAP
    max_timeout_sec: int = MAX_TIMEOUT_SEC
    #: Variables the administrator passes to every run (server trait ``env_passthrough``,
    #: and ``GITPILOT_SANDBOX_ENV_PASSTHROUGH``).
    allowed_vars: frozenset[str] = field(default_factory=admin_passthrough)
    #: Variables a caller may name (trait ``env_allowlist``, and
    #: ``GITPILOT_SANDBOX_ENV_ALLOWLIST``).
    caller_vars: frozenset[str] = field(default_factory=lambda: env_list("env_allowlist"))
    #: Variables an agent may name (trait ``agent_env_allowlist``, and
    #: ``GITPILOT_SANDBOX_AGENT_ENV_ALLOWLIST``): an agent gets none of the caller list.
    agent_vars: frozenset[str] = field(default_factory=lambda: env_list("agent_env_allowlist"))
    #: The caps on a run's inputs together (trait ``max_input_bytes``, ``max_input_files``).
    max_input_bytes: int = MAX_INPUT_BYTES
    max_input_files: int = MAX_INPUT_FILES
    #: What a run may hand back from ``out/`` (traits ``max_out_files``, ``max_out_bytes``).
    out_caps: OutCaps = field(default_factory=OutCaps)

    def __post_init__(self) -> None:
        for setting, names in (
            ("env_passthrough", self.allowed_vars),
            ("env_allowlist", self.caller_vars),
            ("agent_env_allowlist", self.agent_vars),
        ):
            admin_names(names, setting=setting)  # a product secret is refused, never dropped

    def caller_env(self, names: object, *, agent: bool = False) -> tuple[str, ...]:
        """The names a caller (``agent``: an agent) passes by name, checked against the
        administrator's allowlist: sorted, unique (see :func:`env_names`).

        Raises :class:`InvalidRequest` (``env_not_allowed``) naming the names outside it
        and the setting that would allow them.
        """
        wanted = env_names(names)
        allowed, setting = (
            (self.agent_vars, "agent_env_allowlist")
            if agent
            else (self.caller_vars, "env_allowlist")
        )
        refused = [n for n in wanted if n not in allowed]
        if refused:
            who = "an agent" if agent else "a caller"
            listed = ", ".join(sorted(allowed)) or "none"
            raise InvalidRequest(
                f"env: {', '.join(refused)} may not be passed: {who} may name only the "
                f"variables the administrator lists (now: {listed}). To allow one, add it "
                f"to c.SandboxApp.{setting} (server) or {ENV_LISTS[setting]} (CLI, "
                "kernel, in-process agent)",
                code="env_not_allowed",
            )
        return wanted

    @property
    def input_caps(self) -> InputCaps:
        """The caps on what a run's inputs hold together (bytes, files)."""
        return InputCaps(max_bytes=self.max_input_bytes, max_files=self.max_input_files)

    def timeout(self, requested: object, default: int) -> int:
        """The timeout for a run: ``requested`` when given (1..max), else ``default``."""
        if requested is None:
            return max(1, min(int(default), self.max_timeout_sec))
        if isinstance(requested, bool) or not isinstance(requested, int):
            raise InvalidRequest(
                f"timeout_sec must be an integer between 1 and {self.max_timeout_sec}",
                code="invalid_timeout",
            )
        if not 1 <= requested <= self.max_timeout_sec:
            raise InvalidRequest(
                f"timeout_sec must be between 1 and {self.max_timeout_sec}, got {requested}",
                code="invalid_timeout",
            )
        return requested

    def passing(self, *, allow_network: bool, passthrough: Iterable[str] = ()) -> frozenset[str]:
        """The names that reach a run: base set, admin list, or passed by name (proxies only
        with network on); never a product secret (:func:`never_passed`), whatever the lists."""
        names = BASE_VARS | self.allowed_vars | frozenset(passthrough)
        if allow_network:
            names |= PROXY_VARS
        return frozenset(n for n in names if not never_passed(n))

    def passes(self, name: str, *, allow_network: bool, passthrough: Iterable[str] = ()) -> bool:
        """True when ``name`` reaches a run (see :meth:`passing`)."""
        return name in self.passing(allow_network=allow_network, passthrough=passthrough)

    def scrub_env(
        self,
        environ: Mapping[str, str],
        *,
        allow_network: bool,
        passthrough: Iterable[str] = (),
    ) -> dict[str, str]:
        """The environment for a sandboxed process, by allowlist (see :data:`BASE_VARS`).

        Nothing else of the server's environment reaches a run: no token, no
        ``DATABASE_URL``, no cloud key, unless the administrator listed it (for every run,
        or for callers to name).
        Proxies pass only with network on.
        """
        names = self.passing(allow_network=allow_network, passthrough=passthrough)
        # Only the names are looked at, and the values of those that pass read: the
        # environment's own order is kept.
        return {k: environ[k] for k in environ if k in names}

    def check_destructive(self, language: str, code: str, command: Iterable[str]) -> None:
        """Refuse a snippet whose shell text or launched command matches a destructive pattern."""
        label = destructive_label(language, code, command)
        if label is not None:
            raise PolicyViolation(
                f"refused by policy: destructive pattern {label!r} found",
                code="destructive_pattern",
            )
