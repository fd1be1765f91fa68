"""The subprocess and off backends, with real child processes."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.backend import RunRequest
from gitpilot_jupyter.sandbox.languages import Interpreters
from gitpilot_jupyter.sandbox.local.backends import NullSandbox, SubprocessSandbox
from gitpilot_jupyter.sandbox.local.isolation import Isolator
from gitpilot_jupyter.sandbox.outfiles import OutFile
from gitpilot_jupyter.sandbox.request import Caller, RunOptions
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.service import SandboxService
from tests.support.system import require_system

from .conftest import interpreter_installed


def run(service: SandboxService, language: str, code: str, **options: object) -> RunResult:
    options = {"language": language, "code": code, **options}
    planned = asyncio.run(
        service.plan_and_run(RunOptions(**options), confirmed=True)  # type: ignore[arg-type]
    )
    assert planned.result is not None
    return planned.result


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("python", "print(2+2)"),
        ("javascript", "console.log(2+2)"),
        ("bash", "echo $((2+2))"),
    ],
)
def test_hello_world_in_each_language(service: SandboxService, language: str, code: str) -> None:
    require_system(language, interpreter_installed(language), f"no {language} interpreter on PATH")
    result = run(service, language, code)
    assert (result.exit_code, result.stdout, result.stderr) == (0, "4\n", "")
    assert result.backend == "subprocess" and result.language == language
    assert not result.timed_out and not result.truncated and result.sandbox_id is None
    assert (
        result.run_id.startswith("run_") and result.plan_id and result.plan_id.startswith("plan_")
    )
    assert "tempdir" in result.isolation and "env-scrub" in result.isolation


def test_traceback_lands_in_stderr(service: SandboxService) -> None:
    result = run(service, "py", "raise ValueError('boom')")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr and "ValueError: boom" in result.stderr


def test_input_fails_fast_with_eoferror(service: SandboxService) -> None:
    started = time.monotonic()
    result = run(service, "python", "input('name? ')", timeout_sec=30)
    assert time.monotonic() - started < 10
    assert not result.timed_out and "EOFError" in result.stderr


def test_stdin_text_is_fed(service: SandboxService) -> None:
    result = run(service, "python", "print(input().upper())", stdin="ada\n")
    assert result.stdout == "ADA\n"


def test_output_before_a_timeout_survives_the_kill(service: SandboxService) -> None:
    code = "import time\nprint('before', flush=True)\ntime.sleep(30)\nprint('after')"
    started = time.monotonic()
    result = run(service, "python", code, timeout_sec=2)
    elapsed = time.monotonic() - started
    assert result.timed_out and result.exit_code == -1
    assert result.stdout == "before\n"
    assert elapsed < 6, f"a 2 s timeout took {elapsed:.1f} s"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.usefixtures("allow_off")
def test_grandchildren_are_killed_on_timeout(service: SandboxService, tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    code = (
        f"(sleep 300 & echo $! >> {pidfile}; bash -c 'sleep 300 & echo $! >> {pidfile}; wait') &\n"
        f"echo $$ >> {pidfile}\nwait\n"
    )
    result = run(service, "bash", code, timeout_sec=2, backend="off")
    assert result.timed_out
    time.sleep(0.3)
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 3
    assert [p for p in pids if _alive(p)] == []


def test_background_children_do_not_outlive_a_finished_snippet(
    service: SandboxService, tmp_path: Path
) -> None:
    # The bare isolator: the pid file is written on the host (OS isolation would hide
    # it) and the kill tested is the process group's; tests/isolation/ covers the rest.
    service = SandboxService(settings=service.settings, isolator=Isolator(allow_uncontained=True))
    pidfile = tmp_path / "bg"
    result = run(service, "bash", f"sleep 300 >/dev/null 2>&1 & echo $! > {pidfile}; echo done")
    assert result.exit_code == 0 and result.stdout == "done\n"
    time.sleep(0.3)
    assert not _alive(int(pidfile.read_text()))


def test_flood_is_truncated_at_a_character_boundary(service: SandboxService) -> None:
    service.policy = type(service.policy)(max_output_bytes=1001)
    code = "for i in range(200000):\n    print('é' * 3)"
    result = run(service, "python", code, timeout_sec=60)
    assert result.truncated and result.exit_code == 0
    assert len(result.stdout.encode()) <= 1001
    assert "\ufffd" not in result.stdout
    assert result.stdout.startswith("ééé\n")


def test_secrets_are_invisible_to_the_snippet(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret")
    monkeypatch.setenv("MY_SERVICE_TOKEN", "svc_secret")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub_secret")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("VISIBLE_SETTING", "visible")
    code = "import os\nprint(sorted(os.environ))"
    result = run(service, "python", code)
    for name in ("GITHUB_TOKEN", "MY_SERVICE_TOKEN", "JUPYTERHUB_API_TOKEN", "HTTPS_PROXY"):
        assert name not in result.stdout
    # An allowlist: a harmless-looking name passes only when the administrator lists it
    # and the caller names it.
    assert "VISIBLE_SETTING" not in result.stdout and "'PATH'" in result.stdout
    service.policy = dataclasses.replace(service.policy, caller_vars=frozenset({"VISIBLE_SETTING"}))
    named = run(service, "python", code, env=["VISIBLE_SETTING"])
    assert "VISIBLE_SETTING" in named.stdout and "GITHUB_TOKEN" not in named.stdout


def test_proxies_stay_when_network_is_allowed(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    result = run(service, "bash", 'echo "$HTTPS_PROXY"', allow_network=True)
    assert result.stdout == "http://proxy.invalid:3128\n"


def test_snippet_runs_in_a_private_temp_dir_that_is_removed(service: SandboxService) -> None:
    result = run(
        service, "python", "import os\nprint(os.getcwd())\nprint(oct(os.stat('.').st_mode & 0o777))"
    )
    cwd, mode = result.stdout.split()
    assert mode == "0o700"
    assert cwd != os.getcwd()
    # Removed after the answer (in the background); closing waits for every removal.
    asyncio.run(service.aclose())
    assert not Path(cwd).exists()


def test_missing_interpreter_is_reported_as_could_not_launch() -> None:
    backend = SubprocessSandbox(Interpreters(javascript="no-such-node-binary"))
    result = asyncio.run(backend.run(RunRequest(language="javascript", code="1", timeout_sec=5)))
    assert result.exit_code == -1 and not result.timed_out
    assert "could not launch" in result.stderr and "no-such-node-binary" in result.stderr


def test_output_is_streamed_as_it_is_produced() -> None:
    chunks: list[tuple[float, str, str]] = []

    async def collect(stream: str, text: str) -> None:
        chunks.append((time.monotonic(), stream, text))

    code = (
        "import sys, time\nprint('one', flush=True)\ntime.sleep(1)\n"
        "print('two', file=sys.stderr, flush=True)"
    )
    started = time.monotonic()
    result = asyncio.run(
        NullSandbox().run(RunRequest(language="python", code=code, timeout_sec=20), collect)
    )
    assert [(s, t) for _, s, t in chunks] == [("stdout", "one\n"), ("stderr", "two\n")]
    assert chunks[0][0] - started < result.duration_ms / 1000 - 0.5
    assert result.stdout == "one\n" and result.stderr == "two\n"


@pytest.mark.usefixtures("allow_off")
def test_off_backend_has_no_os_layers(service: SandboxService) -> None:
    """No isolation layer: at most the per-run cgroup that kills its leftovers."""
    result = run(service, "python", "print(1)", backend="off")
    assert result.backend == "off"
    assert result.isolation in (
        ["tempdir", "env-scrub"],
        ["tempdir", "env-scrub", "cgroup-cleanup"],
    )


def test_killed_by_signal_reports_128_plus_signal(service: SandboxService) -> None:
    result = run(service, "bash", "kill -9 $$")
    assert result.exit_code == 137 and not result.timed_out


def test_the_kernel_client_passes_named_variables_and_the_digest_binds_them(
    service: SandboxService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gitpilot_jupyter.client.local import LocalClient
    from gitpilot_jupyter.sandbox.errors import ApprovalError
    from gitpilot_jupyter.sandbox.sync import run_sync

    monkeypatch.setenv("TEST_NAMED", "named-value")
    service.policy = dataclasses.replace(service.policy, caller_vars=frozenset({"TEST_NAMED"}))
    client = LocalClient(service)
    code = "import os; print(os.environ.get('TEST_NAMED'))"
    plan = run_sync(client.plan(RunOptions(language="python", code=code, env=["TEST_NAMED"])))
    assert plan.spec.env == ("TEST_NAMED",)
    assert any("TEST_NAMED" in c["label"] for c in plan.checks)
    result = run_sync(client.approve_and_run(plan))
    assert result.stdout == "named-value\n"
    # An approval for a plan without the name does not cover a run that adds it.
    bare = run_sync(client.plan(RunOptions(language="python", code=code)))
    token = run_sync(client.approve(bare.plan_id))["approval_token"]
    with pytest.raises(ApprovalError):
        run_sync(
            service.run(
                token,
                Caller(session_id=client.session_id),
                expected=RunOptions(language="python", code=code, env=["TEST_NAMED"]),
            )
        )


def test_the_envelope_is_every_field_in_order_its_lists_copied(service: SandboxService) -> None:
    import typing

    result = run(
        service, "python", "import os\nopen('out/a.txt', 'w').write('a')\nprint(2+2)\n{'a': [1]}"
    )
    envelope = result.to_dict()
    assert envelope == dataclasses.asdict(result)
    assert list(envelope) == [f.name for f in dataclasses.fields(RunResult)]
    for name in ("command", "isolation", "notes"):
        envelope[name].append("changed")
        assert "changed" not in getattr(result, name)
    envelope["outputs"][0]["data"]["text/plain"] = "changed"
    assert result.outputs[0]["data"] == {"text/plain": "{'a': [1]}"}
    envelope["files"][0]["name"] = "changed"  # a flat record: copied too
    assert result.files[0]["name"] == "a.txt"
    # to_dict copies lists and their flat records only (and the outputs whole): a field of
    # another kind (a dict, a dataclass, a record holding a list) needs more.
    simple = {str, int, bool, str | None, list[str], list[OutFile]}
    hints = typing.get_type_hints(RunResult)
    assert {name: hint for name, hint in hints.items() if hint not in simple} == {
        "outputs": list[dict[str, typing.Any]]
    }
