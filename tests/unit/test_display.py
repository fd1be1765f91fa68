"""Approval views cannot be made to lie: escapes, cuts and the digest, in every Python face.

The shared cases (``display_cases.json``) are the contract of the escaping rule; the
lab's TypeScript twin is held to the same file by ``labextension/test/escape.test.ts``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.display import code_preview, escape_segments, escape_text
from gitpilot_jupyter.sandbox.plans import ExecutionPlan
from gitpilot_jupyter.sandbox.scan import scan
from gitpilot_jupyter.sandbox.spec import RunSpec
from gitpilot_jupyter.widgets.approval import plan_html

CASES: dict[str, Any] = json.loads((Path(__file__).parent / "display_cases.json").read_text())
BIN = Path(sys.executable).parent

#: Erases the line a terminal just printed and moves to its start: the spoof of the issue.
ERASE = "\x1b[2K\x1b[1G"
HOSTILE = (
    f"print('harmless'){ERASE}print('also harmless')\n"
    "x = 1  # \u202eevil\u202c\n"
    + "".join(f"print({i})\n" for i in range(60))
    + "import importlib; importlib.import_module('o' + 's').system('id')\n"
)


@pytest.mark.parametrize("case", CASES["escape"], ids=lambda c: c["escaped"][:30])
def test_escape_rule_matches_the_shared_cases(case: dict[str, Any]) -> None:
    assert escape_text(case["text"]) == case["escaped"]
    assert [list(s) for s in escape_segments(case["text"])] == case["segments"]


@pytest.mark.parametrize("case", CASES["preview"], ids=lambda c: escape_text(c["code"])[:30])
def test_code_preview_matches_the_shared_cases(case: dict[str, Any]) -> None:
    preview = code_preview(
        case["code"], max_lines=case["max_lines"], max_line_chars=case["max_line_chars"]
    )
    assert preview.lines == case["lines"]
    assert (preview.total_lines, preview.hidden_lines) == (
        case["total_lines"],
        case["hidden_lines"],
    )
    assert (preview.cut_lines, preview.escaped, preview.notes) == (
        case["cut_lines"],
        case["escaped"],
        case["notes"],
    )


def test_cli_plan_shows_escapes_cuts_and_the_digest(tmp_path: Path) -> None:
    """The bytes a terminal gets from ``jupyter sandbox plan`` hold no control character."""
    done = subprocess.run(
        [str(BIN / "jupyter-sandbox"), "plan", "python", "-c", HOSTILE],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
        env={
            "PATH": f"{BIN}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "GITPILOT_CONFIG_DIR": str(tmp_path),
        },
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode("utf-8")
    assert not any(c in out for c in ("\x1b", "\r", "\u202e", "\u202c")), out
    assert "print('harmless')\\x1b[2K\\x1b[1Gprint('also harmless')" in out
    assert "\\u202eevil\\u202c" in out
    assert "23 more lines not shown (the code has 63)" in out
    assert "4 hidden or look-alike characters shown as escapes" in out
    assert "--json prints the whole code" in out
    assert "digest   sha256:" in out
    assert "warning (high): dynamic import" in out


def _plan(code: str) -> ExecutionPlan:
    return ExecutionPlan(
        plan_id="plan_0123456789abcdef",
        goal="Run evil\u202egnp.py",
        source="api",
        spec=RunSpec(
            language="python",
            code=code,
            stdin=None,
            timeout_sec=120,
            network=False,
            backend="subprocess",
        ),
        command=["python", "inline.py"],
        checks=[],
        warnings=scan("python", code),
        blocked=False,
        requires_approval=True,
        digest="sha256:" + "ab" * 32,
        created_at=0.0,
    )


def test_notebook_card_marks_escapes_and_says_what_it_cut() -> None:
    code = HOSTILE + "".join(f"print({i})\n" for i in range(500)) + "x = 1" + " " * 1500 + "\n"
    shown = plan_html(_plan(code))
    assert "\x1b" not in shown and "\u202e" not in shown
    assert ">\\x1b</span>[2K" in shown and "evil\\u202egnp.py" in shown
    assert shown.count("class='gitpilot-escape'") == 4
    assert "64 more lines not shown (the code has 564)" in shown
    assert "sha256:" + "ab" * 32 in shown
    assert "dynamic import" in shown


@pytest.mark.parametrize(
    ("code", "label"),
    [
        ("import importlib\nimportlib.import_module('o' + 's').system('id')", "dynamic import"),
        ("__import__('o' + 's').system('id')", "dynamic import"),
        ("import sys\nsys.modules['o' + 's']", "dynamic import"),
        ("getattr(__builtins__, 'ev' + 'al')('1')", "dynamic import"),
        ("[c for c in ().__class__.__base__.__subclasses__()]", "interpreter internals"),
        ("globals()['__builtins__']", "interpreter internals"),
        ("f = getattr(obj, name)", "getattr / globals"),
        ("run = eval\nrun('1')", "exec / eval"),
        ("\uff45\uff58\uff45\uff43('print(1)')", "exec / eval"),  # fullwidth: NFKC is exec
        ("import os\nos.\\\nsystem('id')", "os.system"),  # a backslash continuation
        ("import os\nos.posix_spawn('/bin/sh', ['sh'], {})", "os.system"),
        ("from os import system\nsystem('id')", "os.system"),
        ("from os import *\nsystem('id')", "os.system"),
        ("import os as o\no.system('id')", "os.system"),
        ("import os\nrun = os.system\nrun('id')", "os.system"),  # named, never called
        ("import os\nshell = os\nshell.system('id')", "os.system"),
        ("import asyncio\nasyncio.create_subprocess_shell('id')", "asyncio subprocess"),
        ("import ctypes\nctypes.CDLL(None).system(b'id')", "ctypes / cffi"),
        ("import pickle\npickle.loads(payload)", "pickle / marshal"),
        ("import marshal\nexec(marshal.loads(blob))", "pickle / marshal"),
        # U+3164, a Hangul filler, is a valid name that no view shows.
        ("import os\n\u3164 = os.system\n\u3164('id')", "hidden or look-alike characters"),
        ("\u043es = __import__('os')", "hidden or look-alike characters"),  # a Cyrillic o
    ],
)
def test_scan_flags_python_tricks(code: str, label: str) -> None:
    assert label in [w["label"] for w in scan("python", code)]


@pytest.mark.parametrize(
    "code",
    [
        "require('child' + '_process').execSync('id')",
        "const m = await import('node:' + 'child_process')",
        "require(name)",
    ],
)
def test_scan_flags_dynamic_require(code: str) -> None:
    assert "dynamic require" in [w["label"] for w in scan("javascript", code)]


def test_scan_leaves_plain_code_alone() -> None:
    assert scan("python", "import re\nprint(re.compile('x').pattern)\n") == []
    # Other scripts in words of their own, Windows line ends, names that merely contain "os".
    plain = (
        "import os, platform\r\n\u0434\u0430\u043d\u043d\u044b\u0435 = "
        "'\u041f\u0440\u0438\u0432\u0435\u0442'  # caf\u00e9\r\n"
        "print(platform.system(), os.sep)\r\n"
    )
    assert scan("python", plain) == []
    assert scan("javascript", "const fs = require('fs');\nconsole.log(1)") == []
