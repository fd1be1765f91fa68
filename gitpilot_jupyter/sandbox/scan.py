"""Code scan: warnings a plan shows before anyone approves it.

Severities: ``high`` (runs other programs or arbitrary code), ``medium``
(network access), ``low`` (reads the environment, writes files). The scan is
advice for the human approving, not a security boundary.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Literal, cast

from .display import count_escapes
from .policy import find_destructive
from .records import PlanWarning


@dataclass(frozen=True)
class Rule:
    """One scan rule: languages it applies to, the pattern, what to say."""

    languages: tuple[str, ...]
    severity: Literal["high", "medium", "low"]
    label: str
    pattern: re.Pattern[str]
    detail: str


def _rule(langs: str, severity: str, label: str, pattern: str, detail: str) -> Rule:
    assert severity in ("high", "medium", "low")
    level = cast(Literal["high", "medium", "low"], severity)
    return Rule(tuple(langs.split()), level, label, re.compile(pattern, re.MULTILINE), detail)


RULES: tuple[Rule, ...] = (
    _rule(
        "python",
        "high",
        "os.system",
        # Named, not only called: ``run = os.system`` binds it to a name the scan cannot follow.
        r"\bos\s*\.\s*(system|popen|exec\w*|spawn\w*|posix_spawn\w*)\b"
        r"|\bfrom\s+os\s+import\b[^\n]*(\b(system|popen|exec\w*|spawn\w*|posix_spawn\w*)\b|\*)"
        r"|\bimport\s+os\s+as\b|(?<![\w.])\w+\s*=\s*os\s*(?:$|[;#)\],])",
        "runs a shell command or another program from Python (os.system, os.posix_spawn, "
        "os.exec*, or the os module under another name)",
    ),
    _rule(
        "python",
        "high",
        "asyncio subprocess",
        r"\bcreate_subprocess_(exec|shell)\b",
        "starts other programs through asyncio",
    ),
    _rule(
        "python",
        "high",
        "ctypes / cffi",
        r"\b(ctypes|cffi|_ctypes)\b",
        "calls C functions and system calls directly, past everything the scan looks for",
    ),
    _rule(
        "python",
        "high",
        "pickle / marshal",
        r"\b(pickle|cPickle|_pickle|dill|cloudpickle|marshal|shelve|jsonpickle)\b",
        "loads objects whose loading runs code (pickle, marshal): what runs is not in the code",
    ),
    _rule(
        "python",
        "high",
        "exec / eval",
        r"(?<![\w.])(exec|eval|compile)\b",
        "executes code built at run time",
    ),
    _rule(
        "python",
        "high",
        "dynamic import",
        r"(?<![\w.])__import__\b|\bimportlib\b|\bimport_module\b|\bsys\s*\.\s*modules\b"
        r"|\b__builtins__\b|\bbuiltins\b|\b__loader__\b",
        "imports or reaches a module by a name built at run time (importlib, __import__, "
        "sys.modules, builtins): what it uses does not appear in the code",
    ),
    _rule(
        "python",
        "high",
        "interpreter internals",
        r"__(globals|subclasses|getattribute|code|closure|bases|base|mro)__"
        r"|\b(globals|locals|vars)\s*\(\s*\)\s*\[",
        "reaches functions through interpreter internals (__subclasses__, __globals__, "
        "globals()[...]), a way around the other checks",
    ),
    _rule(
        "python",
        "medium",
        "getattr / globals",
        r"\b(getattr|setattr|delattr)\s*\(|\b(globals|locals|vars)\s*\(",
        "looks up attributes or names that may be built at run time: "
        "what it calls may not appear in the code",
    ),
    _rule(
        "python",
        "high",
        "subprocess",
        r"\bsubprocess\b|\bpty\s*\.\s*spawn",
        "starts other programs",
    ),
    _rule("javascript", "high", "child_process", r"\bchild_process\b", "starts other programs"),
    _rule(
        "javascript",
        "high",
        "dynamic require",
        r"\brequire\s*\((?!\s*(['\"`])[\w@./:-]*\1\s*\))|\bimport\s*\("
        r"|\bprocess\s*\.\s*(binding|dlopen|mainModule)\b|\bmodule\s*\.\s*constructor\b",
        "loads a module by a name built at run time: what it uses does not appear in the code",
    ),
    _rule(
        "javascript",
        "high",
        "eval",
        r"(?<![\w.])(eval|Function)\s*\(",
        "executes code built at run time",
    ),
    _rule(
        "bash",
        "high",
        "eval / sudo",
        r"(?<![\w-])(eval|sudo|su)\s",
        "runs code built at run time or with raised privileges",
    ),
    _rule(
        "bash",
        "high",
        "pipe to shell",
        r"\|\s*(ba|z|da)?sh\b",
        "pipes downloaded or generated text into a shell",
    ),
    _rule(
        "python",
        "medium",
        "network",
        r"\b(import|from)\s+(socket|requests|urllib\w*|httpx|"
        r"http\.client|aiohttp|ftplib|smtplib|paramiko)\b",
        "uses a network library",
    ),
    _rule(
        "javascript",
        "medium",
        "network",
        r"\bfetch\s*\(|require\(\s*['\"](https?|net|dgram|"
        r"axios)['\"]\s*\)",
        "uses the network",
    ),
    _rule(
        "bash",
        "medium",
        "network",
        r"(?<![\w-])(curl|wget|nc|ncat|ssh|scp|rsync|ftp)\s",
        "uses a network tool",
    ),
    _rule(
        "python",
        "low",
        "environment",
        r"\bos\s*\.\s*(environ|getenv)\b",
        "reads environment variables",
    ),
    _rule(
        "javascript", "low", "environment", r"\bprocess\s*\.\s*env\b", "reads environment variables"
    ),
    _rule(
        "bash",
        "low",
        "environment",
        r"(?<![\w-])(env|printenv|set)\s*($|\|)",
        "lists environment variables",
    ),
    _rule(
        "python",
        "low",
        "file write",
        r"\bopen\s*\([^)]*['\"][wax]b?\+?['\"]|\.write_(text|bytes)\s*\(|\bshutil\s*\.\s*"
        r"(rmtree|move|copy\w*)\b|\bos\s*\.\s*(remove|unlink|rmdir|rename)\b",
        "writes or removes files",
    ),
    _rule(
        "javascript",
        "low",
        "file write",
        r"\bfs\s*\.\s*(write|append|unlink|rm|rename)\w*",
        "writes or removes files",
    ),
    _rule(
        "bash",
        "low",
        "file write",
        r"(?<![<>&\d])>{1,2}\s*(?!&|/dev/null)\S|(?<![\w-])(rm|mv|tee)\s",
        "writes or removes files",
    ),
)


#: Said when a view must show some of the code as escapes (see :mod:`.display`).
HIDDEN_CHARACTERS = PlanWarning(
    severity="high",
    label="hidden or look-alike characters",
    detail="the code has characters that look like others or like nothing (invisible names, "
    "Cyrillic or fullwidth letters among Latin ones, bidi controls): views show them as "
    "escapes; what runs may differ from what it seems to say",
)


def _variants(code: str) -> tuple[str, ...]:
    """``code`` as written and as the interpreter reads its names.

    Python folds identifiers with NFKC (fullwidth ``exec`` is ``exec``) and joins lines ending
    in a backslash; a rule must not be dodged by either.
    """
    folded = unicodedata.normalize("NFKC", code).replace("\\\r\n", "").replace("\\\n", "")
    return (code,) if folded == code else (code, folded)


def scan(language: str, code: str) -> list[PlanWarning]:
    """Warnings for ``code``, most severe first; each rule is reported once."""
    found: list[PlanWarning] = []
    variants = _variants(code)
    for rule in RULES:
        if language in rule.languages and any(rule.pattern.search(v) for v in variants):
            found.append({"severity": rule.severity, "label": rule.label, "detail": rule.detail})
    if count_escapes(code.replace("\r\n", "\n")):
        found.append(PlanWarning(**HIDDEN_CHARACTERS))
    if language != "bash":
        label = find_destructive(code)
        if label:
            found.append(
                {
                    "severity": "high",
                    "label": "destructive command",
                    "detail": f"the code contains the destructive shell command {label!r}",
                }
            )
    order = {"high": 0, "medium": 1, "low": 2}
    found.sort(key=lambda w: order[w["severity"]])
    return found
