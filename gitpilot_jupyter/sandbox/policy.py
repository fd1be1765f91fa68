"""SandboxPolicy: timeouts, output cap, the environment allowlist, destructive patterns."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .errors import InvalidRequest, PolicyViolation
from .output import DEFAULT_OUTPUT_CAP
from .settings import MAX_TIMEOUT_SEC

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
#: The administrator's pass-through list for processes without a server trait (CLI, kernel):
#: comma- or space-separated variable names.
ENV_PASSTHROUGH_ENV = "GITPILOT_SANDBOX_ENV_PASSTHROUGH"
MAX_ENV_NAMES = 64
#: The server's own credentials: a run holding one could plan and approve its own runs
#: (threat model row 5), so a caller may never pass them through.
SERVER_CREDENTIALS = frozenset(
    {"JUPYTER_TOKEN", "GITPILOT_JUPYTER_TOKEN", "JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN"}
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def env_names(names: object) -> tuple[str, ...]:
    """Validate the variable names a caller passes through (``--env NAME``), sorted, unique.

    Raises :class:`InvalidRequest` for anything that is not a list of variable names.
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
        if name in SERVER_CREDENTIALS:
            raise InvalidRequest(
                f"env: {name} is the Jupyter server's own token; a run holding it could "
                "approve its own plans, so it is never passed to a snippet",
                code="invalid_env",
            )
        out.add(name)
    if len(out) > MAX_ENV_NAMES:
        raise InvalidRequest(f"env: at most {MAX_ENV_NAMES} names", code="invalid_env")
    return tuple(sorted(out))


def admin_passthrough(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The names in ``GITPILOT_SANDBOX_ENV_PASSTHROUGH`` (invalid ones are ignored)."""
    raw = (os.environ if environ is None else environ).get(ENV_PASSTHROUGH_ENV, "")
    return frozenset(n for n in re.split(r"[\s,]+", raw) if _ENV_NAME.fullmatch(n))


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
    #: else ``GITPILOT_SANDBOX_ENV_PASSTHROUGH``).
    allowed_vars: frozenset[str] = field(default_factory=admin_passthrough)

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
        with network on); never one of :data:`SERVER_CREDENTIALS`."""
        names = BASE_VARS | self.allowed_vars | frozenset(passthrough)
        if allow_network:
            names |= PROXY_VARS
        return names - SERVER_CREDENTIALS

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
        ``DATABASE_URL``, no cloud key, unless the administrator or the caller named it.
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
