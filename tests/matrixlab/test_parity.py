"""The same snippet gives the same result on `subprocess` and `matrixlab`, through the service."""

from __future__ import annotations

import shutil

import pytest

from gitpilot_jupyter.sandbox.service import SandboxService

COMPARED = ("exit_code", "stdout", "stderr", "timed_out", "truncated", "language", "command")

CASES = [
    ("python", "import sys\nprint('out')\nsys.stderr.write('err\\n')\nsys.exit(3)", None, 10),
    ("python", "print(input()[::-1])", "olleh\n", 10),
    ("python", "try:\n    input()\nexcept EOFError:\n    print('eof')", None, 10),
    ("python", "print('héllo wörld ✓')", None, 10),
    ("python", "print('é' * 400_000)", None, 10),
    ("python", "import time\nprint('before', flush=True)\ntime.sleep(30)", None, 2),
    ("bash", "echo hi; echo oops >&2; exit 5", None, 10),
    ("javascript", "console.log([1, 2].map(x => x * 21).join(','))", None, 10),
]


@pytest.mark.parametrize(("language", "code", "stdin", "timeout"), CASES)
async def test_subprocess_and_matrixlab_agree(
    matrixlab_service: SandboxService, language: str, code: str, stdin: str | None, timeout: int
) -> None:
    if language == "javascript" and shutil.which("node") is None:
        pytest.skip("node is not installed")
    results = {}
    for backend in ("subprocess", "matrixlab"):
        _, result = await matrixlab_service.run_approved_here(
            language=language, code=code, stdin=stdin, timeout_sec=timeout, backend=backend
        )
        results[backend] = result
    local, remote = results["subprocess"], results["matrixlab"]
    assert {k: getattr(remote, k) for k in COMPARED} == {k: getattr(local, k) for k in COMPARED}
    assert remote.backend == "matrixlab" and remote.sandbox_id is not None
    assert local.sandbox_id is None
