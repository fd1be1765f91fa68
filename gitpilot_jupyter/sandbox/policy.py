"""SandboxPolicy: timeouts, output cap, environment scrubbing, destructive patterns."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import InvalidRequest, PolicyViolation
from .output import DEFAULT_OUTPUT_CAP
from .settings import MAX_TIMEOUT_SEC

#: Secrets named by the original product; always stripped.
SECRET_VARS = frozenset(
    {
        "GITHUB_TOKEN",
        "GITPILOT_GITHUB_TOKEN",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "WATSONX_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "JUPYTERHUB_API_TOKEN",
        "JPY_API_TOKEN",
        "JUPYTER_TOKEN",
    }
)
#: Any variable whose upper-cased name contains one of these is stripped.
SECRET_NAME_PARTS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY", "CREDENTIAL")
PROXY_VARS = frozenset(
    name
    for base in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "FTP_PROXY")
    for name in (base, base.lower())
)

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


@dataclass(frozen=True)
class SandboxPolicy:
    """The rules every backend applies; one instance is shared by the service."""

    max_output_bytes: int = DEFAULT_OUTPUT_CAP
    max_timeout_sec: int = MAX_TIMEOUT_SEC
    extra_secret_vars: frozenset[str] = frozenset()
    allowed_vars: frozenset[str] = frozenset()

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

    def is_secret(self, name: str) -> bool:
        """True when ``name`` must never reach a sandboxed process."""
        if name in self.allowed_vars:
            return False
        upper = name.upper()
        return (
            upper in SECRET_VARS
            or name in self.extra_secret_vars
            or any(part in upper for part in SECRET_NAME_PARTS)
        )

    def scrub_env(self, environ: Mapping[str, str], *, allow_network: bool) -> dict[str, str]:
        """The environment for a sandboxed process: secrets gone, proxies gone when offline."""
        env = {k: v for k, v in environ.items() if not self.is_secret(k)}
        if not allow_network:
            for name in PROXY_VARS:
                env.pop(name, None)
        return env

    def check_destructive(self, language: str, code: str, command: Iterable[str]) -> None:
        """Refuse a snippet whose shell text or launched command matches a destructive pattern."""
        texts = [" ".join(command)]
        if language == "bash":
            texts.insert(0, code)
        for text in texts:
            label = find_destructive(text)
            if label:
                raise PolicyViolation(
                    f"refused by policy: destructive pattern {label!r} found",
                    code="destructive_pattern",
                )
