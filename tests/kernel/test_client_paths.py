"""The two client paths (in-process core, REST API of a real Jupyter server) give the same results.

The server is a real ``jupyter server`` subprocess with the extension; the last
test starts a kernel *through that server* and checks that ``auto`` finds it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from jupyter_client.blocking import BlockingKernelClient

from gitpilot_jupyter.client.local import LocalClient, SandboxClient
from gitpilot_jupyter.client.resolve import launching_server, make_client, server_answers
from gitpilot_jupyter.client.rest import RestClient
from gitpilot_jupyter.kernel.display import SandboxUnavailable
from gitpilot_jupyter.sandbox.errors import SandboxError
from gitpilot_jupyter.sandbox.request import RunOptions
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from gitpilot_jupyter.sandbox.sync import run_sync
from tests.support.cards import approve
from tests.support.live_server import LiveServer

#: Envelope fields that differ between any two runs (``warm``: whether a slot was waiting).
PER_RUN = {"run_id", "plan_id", "duration_ms", "sandbox_id", "warm"}


@pytest.fixture
def both(server: LiveServer) -> dict[str, SandboxClient]:
    """Both paths on the same settings folder."""
    local = LocalClient(SandboxService(settings=SettingsStore(server.config_dir)))
    return {"in-process": local, "REST": RestClient(server.url, server.token)}


def run(
    client: SandboxClient, language: str, code: str, **kw: Any
) -> tuple[RunResult, dict[str, str]]:
    """Plan, approve, run; return the result and the text streamed on each stream."""
    streamed = {"stdout": "", "stderr": ""}

    async def collect(stream: str, text: str) -> None:
        streamed[stream] += text

    async def go() -> RunResult:
        stdin = kw.pop("stdin", None)
        plan = await client.plan(RunOptions(language=language, code=code, stdin=stdin, **kw))
        return await client.approve_and_run(plan, on_output=collect)

    return run_sync(go()), streamed


@pytest.mark.parametrize(
    ("language", "code", "kw"),
    [
        ("python", "import sys\nprint('out')\nprint('err', file=sys.stderr)\n", {}),
        ("bash", 'read name; echo "hi $name"; exit 3', {"stdin": "Ada\n"}),
        ("py", "print('x' * 600_000)", {}),
        ("python", "print('before', flush=True)\nwhile True: pass", {"timeout_sec": 1}),
    ],
    ids=["streams", "stdin-exit", "truncated", "timeout"],
)
def test_both_paths_give_the_same_envelope(
    both: dict[str, SandboxClient], language: str, code: str, kw: dict[str, Any]
) -> None:
    results = {name: run(client, language, code, **dict(kw)) for name, client in both.items()}
    (local, local_stream), (rest, rest_stream) = results["in-process"], results["REST"]
    same = {k: v for k, v in local.to_dict().items() if k not in PER_RUN}
    assert {k: v for k, v in rest.to_dict().items() if k not in PER_RUN} == same
    assert local_stream == rest_stream  # chunks may split differently; the text may not
    assert rest.plan_id is not None and rest.plan_id.startswith("plan_")


def test_both_paths_hand_back_out_files(both: dict[str, SandboxClient]) -> None:
    code = (
        "import os\nos.makedirs('out/plots')\nopen('out/plots/a b.csv', 'w').write('x,y')\n"
        "_ = open('out/raw.bin', 'wb').write(bytes(range(256)))"
    )
    for name, client in both.items():
        result, _ = run(client, "python", code)
        assert sorted(f["name"] for f in result.files) == ["plots/a b.csv", "raw.bin"], name
        got = {f["name"]: run_sync(client.run_file(result.run_id, f["name"])) for f in result.files}
        assert got == {"plots/a b.csv": b"x,y", "raw.bin": bytes(range(256))}, name
        with pytest.raises(SandboxError) as missing:
            run_sync(client.run_file(result.run_id, "nothing.txt"))
        assert missing.value.code == "run_file_not_found", name
        with pytest.raises(SandboxError):
            run_sync(client.run_file(result.run_id, "../raw.bin"))


def test_rest_streams_output_while_the_snippet_runs(server: LiveServer) -> None:
    client = RestClient(server.url, server.token)
    arrivals: list[tuple[float, str]] = []

    async def collect(stream: str, text: str) -> None:
        if text.strip():  # newlines may come as chunks of their own
            arrivals.append((time.monotonic(), text.strip()))

    async def go() -> RunResult:
        code = "import time\nprint('a', flush=True)\ntime.sleep(0.6)\nprint('b', flush=True)\n"
        plan = await client.plan(RunOptions(language="python", code=code))
        return await client.approve_and_run(plan, on_output=collect)

    result = run_sync(go())
    assert result.stdout == "a\nb\n"
    assert [text for _, text in arrivals] == ["a", "b"]
    assert arrivals[1][0] - arrivals[0][0] > 0.4


def test_errors_keep_their_codes_on_both_paths(both: dict[str, SandboxClient]) -> None:
    bad_requests = [
        {"language": "cobol", "code": "x"},
        {"language": "python", "code": "x", "timeout_sec": 0},
        {"language": "python", "code": "  "},
        {"language": "python", "code": "x", "backend": "docker"},
    ]
    codes: dict[str, list[str]] = {}
    for name, client in both.items():
        for body in bad_requests:
            with pytest.raises(SandboxError) as info:
                run_sync(client.plan(RunOptions(**body)))  # type: ignore[arg-type]
            codes.setdefault(name, []).append(info.value.code)
        plan = run_sync(client.plan(RunOptions(language="bash", code="rm -rf /")))
        assert plan.blocked and plan.blocked_reason == "destructive pattern 'rm -rf /'"
        with pytest.raises(SandboxError) as info:
            run_sync(client.approve(plan.plan_id))
        assert info.value.code == "plan_blocked"
    assert codes["REST"] == codes["in-process"]
    assert codes["REST"][0] == "unknown_language"


def test_plan_and_run_applies_one_rule_on_both_paths(both: dict[str, SandboxClient]) -> None:
    for name, client in both.items():
        streamed: list[str] = []

        async def collect(stream: str, text: str, seen: list[str] = streamed) -> None:
            seen.append(text)

        ran = run_sync(
            client.plan_and_run(
                RunOptions(language="python", code="print('ran')"), on_output=collect
            )
        )
        assert ran.result is not None and ran.result.stdout == "ran\n", name
        assert "".join(streamed) == "ran\n" and ran.result.plan_id == ran.plan.plan_id

        # A high warning needs a look: pending, unrun; the card approves and runs it later.
        code = "import subprocess\nprint('looked at')"
        waiting = run_sync(client.plan_and_run(RunOptions(language="python", code=code)))
        assert waiting.result is None and waiting.plan.high_risk, name
        approval = run_sync(client.approve(waiting.plan.plan_id))
        later = run_sync(client.run(str(approval["approval_token"])))
        assert later.stdout == "looked at\n" and later.plan_id == waiting.plan.plan_id

        confirmed = run_sync(
            client.plan_and_run(RunOptions(language="python", code=code), confirmed=True)
        )
        assert confirmed.result is not None and confirmed.result.stdout == "looked at\n"

        with pytest.raises(SandboxError) as info:
            run_sync(
                client.plan_and_run(RunOptions(language="bash", code="rm -rf /"), confirmed=True)
            )
        assert info.value.code == "plan_blocked", name
        assert (
            info.value.message == "refused by policy, nothing ran: destructive pattern 'rm -rf /'"
        )


def test_status_and_config_on_both_paths(both: dict[str, SandboxClient]) -> None:
    rest, local = both["REST"], both["in-process"]
    run_sync(rest.configure({"timeout_sec": 77}))
    assert run_sync(local.status())["settings"]["timeout_sec"] == 77
    assert run_sync(rest.status())["settings"] == run_sync(local.status())["settings"]
    # The settings without a health probe, and where they are saved: the same on both paths.
    assert (
        run_sync(rest.config()) == run_sync(local.config()) == run_sync(local.status())["settings"]
    )
    assert run_sync(rest.config())["timeout_sec"] == 77
    saved = run_sync(local.settings_file())
    assert run_sync(rest.settings_file()) == saved
    assert json.loads(Path(saved).read_text())["sandbox"]["timeout_sec"] == 77
    run_sync(local.configure({"timeout_sec": 120}))


@pytest.mark.usefixtures("allow_off")
def test_switching_to_off_needs_confirm_on_both_paths(both: dict[str, SandboxClient]) -> None:
    for name, client in both.items():
        with pytest.raises(SandboxError) as info:
            run_sync(client.configure({"backend": "off"}))
        assert info.value.code == "confirmation_required", name
        assert '"confirm": true' in info.value.message
        assert run_sync(client.status())["backend"] == "subprocess"
        assert run_sync(client.configure({"backend": "off"}, confirm=True))["backend"] == "off"
        run_sync(client.configure({"backend": "subprocess"}))


def test_magic_with_a_server_url_uses_rest(server: LiveServer) -> None:
    InteractiveShell.clear_instance()
    ip = InteractiveShell.instance()
    try:
        ip.run_line_magic("load_ext", "gitpilot_jupyter")
        ip.run_line_magic("config", f"SandboxMagics.server = {server.url!r}")
        ip.run_line_magic("config", f"SandboxMagics.server_token = {server.token!r}")
        with capture_output() as cap:
            ip.run_cell_magic("sandbox", "--out r", "print('over rest')")
        assert cap.stdout.startswith("over rest\n")
        assert cap.stdout.splitlines()[-1].endswith(" · launched by the Jupyter server")
        assert ip.user_ns["r"]["exit_code"] == 0
        with capture_output() as cap:
            ip.run_line_magic("sandbox", "status")
        assert "backend          subprocess  (ok)" in cap.stdout
        assert cap.stdout.rstrip().endswith("launched by      the Jupyter server")
        ip.run_line_magic("config", "SandboxMagics.server_token = 'wrong'")
        with pytest.raises(UsageError, match="sandbox: "):
            ip.run_cell_magic("sandbox", "", "print('refused')")
        ip.run_line_magic("config", "SandboxMagics.server = 'http://127.0.0.1:9'")
        # An outage is not the user's mistake: a plain sentence with the fix, no UsageError.
        with pytest.raises(SandboxUnavailable) as outage:
            ip.run_cell_magic("sandbox", "", "print('nowhere')")
        assert not isinstance(outage.value, UsageError)
        (shown,) = outage.value._render_traceback_()
        assert shown.startswith(
            "SandboxUnavailable: the sandbox is not available: the Jupyter server at "
            "http://127.0.0.1:9/ does not answer"
        )
        assert shown.endswith("Check that the Jupyter server is running, then run the cell again.")
        assert "[server_unreachable]" not in shown
    finally:
        InteractiveShell.clear_instance()


def test_auto_without_a_launching_server_is_in_process() -> None:
    client = make_client("auto")
    assert isinstance(client, LocalClient) and client.path == "in-process"
    with pytest.raises(SandboxError, match="server must be"):
        make_client("somewhere")


def test_auto_needs_the_extension_to_answer(server: LiveServer) -> None:
    assert server_answers(server.url, server.token)
    assert not server_answers(server.url, "wrong-token")  # 403: not usable, stay in-process
    assert not server_answers(server.url + "/nothing-here", server.token)  # no extension: 404
    assert not server_answers("http://127.0.0.1:9", server.token)


def test_launching_server_is_found_by_its_runtime_file(server: LiveServer) -> None:
    runtime = str(Path(server.env["JUPYTER_RUNTIME_DIR"]))
    info = launching_server([runtime], parent_pid=server.pid)
    assert info is not None and info.pid == server.pid
    assert info.url.startswith(server.url) and info.token == server.token
    assert launching_server([runtime], parent_pid=1) is None


def execute(kc: BlockingKernelClient, code: str, timeout: float = 60) -> tuple[str, str]:
    """Run ``code`` in the kernel; return (stdout, error text)."""
    msg_id = kc.execute(code)
    stdout, error = [], ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kc.get_iopub_msg(timeout=timeout)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream" and content["name"] == "stdout":
            stdout.append(content["text"])
        elif kind == "error":
            error = "\n".join(content["traceback"])
        elif kind == "status" and content["execution_state"] == "idle":
            break
    return "".join(stdout), error


def test_a_kernel_launched_by_the_server_uses_its_rest_api(server: LiveServer) -> None:
    with server.client() as http:
        kernel = http.post("/api/kernels", json={"name": "python3"}).json()
    try:
        connection = Path(server.env["JUPYTER_RUNTIME_DIR"]) / f"kernel-{kernel['id']}.json"
        kc = BlockingKernelClient()
        kc.load_connection_file(str(connection))
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            out, error = execute(kc, "%load_ext gitpilot_jupyter")
            assert not error, error
            out, error = execute(kc, "%%sandbox --out r\nprint('from the kernel')")
            assert not error, error
            assert out.startswith("from the kernel\n")
            assert out.splitlines()[-1].endswith(" · launched by the Jupyter server"), out
            out, error = execute(kc, "%%sandbox bash\nexit 2")
            assert "SandboxRunError: the bash snippet exited with code 2" in error
            assert "Traceback" not in error
            out, _ = execute(kc, "import json; print(json.dumps(r))")
            assert json.loads(out)["stdout"] == "from the kernel\n"
        finally:
            kc.stop_channels()
    finally:
        with server.client() as http:
            http.delete(f"/api/kernels/{kernel['id']}")


def test_matrixlab_calls_on_both_paths(both: dict[str, SandboxClient], runner_standin: Any) -> None:
    for client in both.values():
        report = run_sync(client.test_matrixlab(runner_standin.url, runner_standin.token))
        assert report["ok"] and report["reachable"], report
        bad = run_sync(client.test_matrixlab(runner_standin.url, "wrong-token"))
        assert not bad["ok"] and bad["hint"]
        state = run_sync(client.lifecycle("status"))
        assert state["lifecycle_enabled"] is False
        with pytest.raises(SandboxError) as info:
            run_sync(client.lifecycle("start"))
        assert info.value.code == "lifecycle_disabled"
        assert "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE" in info.value.message


def test_the_settings_panel_over_rest(server: LiveServer) -> None:
    from gitpilot_jupyter.widgets.panel import SandboxSettingsPanel

    panel = SandboxSettingsPanel.for_client(RestClient(server.url, server.token))
    assert panel.model.path == "REST"
    panel.token.value = "rest-secret-token-123"
    panel.image.value = "my/image:1"
    panel.save.click()
    saved = json.loads((server.config_dir / "settings.json").read_text())["sandbox"]
    assert saved["matrixlab_token"] == "rest-secret-token-123"
    assert saved["matrixlab_image"] == "my/image:1"
    assert panel.model.has_token and panel.token.value == ""
    panel.clear_token.click()
    panel.image.value = ""
    panel.save.click()
    saved = json.loads((server.config_dir / "settings.json").read_text())["sandbox"]
    assert "matrixlab_token" not in saved and saved["matrixlab_image"] == ""


def test_the_approval_card_over_rest(server: LiveServer) -> None:
    from gitpilot_jupyter.widgets.approval import ApprovalCard

    client = RestClient(server.url, server.token)
    code = "import subprocess\nprint('approved over rest')"
    plan = run_sync(client.plan(RunOptions(language="python", code=code)))
    assert plan.high_risk and plan.requires_approval

    def pending() -> str:
        with server.client() as http:
            answer = http.get("/api/sandbox/plans")
        assert answer.status_code == 200
        return answer.text

    # Decided on its card, by whoever ran the cell: not in anyone's Pending Plans.
    assert plan.plan_id not in pending()
    card = ApprovalCard(plan, client)
    approve(card)
    shown = "".join(o.get("text", "") for o in card.output.outputs)
    assert card.state == "done" and shown.startswith("approved over rest\n")
    assert shown.rstrip().endswith(" · launched by the Jupyter server")


def test_rejecting_on_the_card_rejects_on_the_server(server: LiveServer) -> None:
    from gitpilot_jupyter.widgets.approval import ApprovalCard

    client = RestClient(server.url, server.token)
    plan = run_sync(client.plan(RunOptions(language="python", code="import subprocess\nprint(1)")))
    card = ApprovalCard(plan, client)
    card.reject_button.click()
    assert card.state == "rejected"
    with server.client() as http:
        approve = http.post("/api/sandbox/approve", json={"plan_id": plan.plan_id})
    assert approve.status_code == 404 and approve.json()["code"] == "plan_not_found"
