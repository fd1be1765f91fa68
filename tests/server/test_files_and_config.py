"""File plans through the server's root, settings over REST, and the token that never leaks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from traitlets.config import Config

from .helpers import Api

PLAN = "api/sandbox/plan"
SECRET = "s3cr3t-runner-token-value"


async def test_file_plan_reads_the_file_under_the_root(api: Api, jp_root_dir: Path) -> None:
    (jp_root_dir / "sub").mkdir()
    (jp_root_dir / "sub" / "demo.py").write_text("print('from a file')\n")
    answer = await api("POST", PLAN, {"file": "sub/demo.py"})
    assert answer.code == 200, answer.text
    plan = answer.body["plan"]
    assert plan["language"] == "python" and plan["source"] == "file_run"
    assert plan["code"] == "print('from a file')\n" and plan["file"] == "sub/demo.py"

    # The content is bound at plan time: editing the file afterwards changes nothing.
    (jp_root_dir / "sub" / "demo.py").write_text("print('edited')\n")
    approval = await api("POST", "api/sandbox/approve", {"plan_id": plan["plan_id"]})
    token = approval.body["approval_token"]
    run = {"language": "python", "code": plan["code"], "approval_token": token}
    result = await api("POST", "api/sandbox/run", run)
    assert result.body["stdout"] == "from a file\n"


async def test_file_plan_language_from_extension_or_body(api: Api, jp_root_dir: Path) -> None:
    (jp_root_dir / "job.sh").write_text("echo hi\n")
    (jp_root_dir / "notes.txt").write_text("echo hi\n")
    assert (await api("POST", PLAN, {"file": "job.sh"})).body["plan"]["language"] == "bash"
    unknown = await api("POST", PLAN, {"file": "notes.txt"})
    assert (unknown.code, unknown.body["code"]) == (400, "unknown_language")
    forced = await api("POST", PLAN, {"file": "notes.txt", "language": "sh"})
    assert forced.body["plan"]["language"] == "bash"


@pytest.mark.parametrize(
    "path",
    [
        "../outside.py",
        "sub/../../outside.py",
        "/etc/passwd",
        "link-out.py",
        "missing.py",
        "sub",
        "",
    ],
)
async def test_file_plan_refuses_paths_outside_the_root(
    api: Api, jp_root_dir: Path, path: str
) -> None:
    (jp_root_dir / "sub").mkdir(exist_ok=True)
    outside = jp_root_dir.parent / "outside.py"
    outside.write_text("print('outside')\n")
    link = jp_root_dir / "link-out.py"
    if not link.exists():
        os.symlink(outside, link)
    answer = await api("POST", PLAN, {"file": path})
    assert (answer.code, answer.body["code"]) == (400, "invalid_file")
    assert "outside" not in answer.text or "outside the server's root" in answer.text
    assert "print(" not in answer.text


@pytest.mark.parametrize("path", [".env.py", ".hidden/job.py", "sub/.secret.sh"])
async def test_file_plan_refuses_hidden_files(api: Api, jp_root_dir: Path, path: str) -> None:
    target = jp_root_dir / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("print('API_KEY=hunter2')\n")
    answer = await api("POST", PLAN, {"file": path})
    assert (answer.code, answer.body["code"]) == (400, "invalid_file")
    assert "hunter2" not in answer.text


@pytest.mark.parametrize(
    "jp_server_config", [Config({"ContentsManager": {"allow_hidden": True}})], indirect=True
)
async def test_hidden_files_follow_the_contents_manager(api: Api, jp_root_dir: Path) -> None:
    (jp_root_dir / ".tool.py").write_text("print(1)\n")
    answer = await api("POST", PLAN, {"file": ".tool.py"})
    assert answer.code == 200 and answer.body["plan"]["code"] == "print(1)\n"


async def test_config_roundtrip_and_masking(api: Api, sandbox_config_dir: Path) -> None:
    config = await api("GET", "api/sandbox/config")
    assert config.body["backend"] == "subprocess" and config.body["has_token"] is False
    changed = await api(
        "PUT",
        "api/sandbox/config",
        {"matrixlab_token": SECRET, "timeout_sec": 30, "matrixlab_url": "http://runner:8765"},
    )
    assert changed.code == 200, changed.text
    assert changed.body["has_token"] is True and changed.body["settings"]["timeout_sec"] == 30
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())
    assert saved["sandbox"]["matrixlab_token"] == SECRET  # persisted, but never shown
    config = await api("GET", "api/sandbox/config")
    assert config.body["has_token"] is True and config.body["matrixlab_url"] == "http://runner:8765"
    cleared = await api("PUT", "api/sandbox/config", {"matrixlab_token": ""})
    assert cleared.body["has_token"] is False


#: The administrator lists ``off`` (it is not allowed by default).
OFF_ALLOWED = {"allowed_backends": ["subprocess", "matrixlab", "off"]}


@pytest.mark.parametrize("jp_server_config", [OFF_ALLOWED], indirect=True)
async def test_switching_to_off_needs_an_explicit_confirmation(
    api: Api, sandbox_config_dir: Path
) -> None:
    refused = await api("PUT", "api/sandbox/config", {"backend": "off", "timeout_sec": 30})
    assert (refused.code, refused.body["code"]) == (409, "confirmation_required")
    message = refused.body["message"]
    assert "No isolation: runs on the host as you" in message  # the question, in words
    assert '"confirm": true' in message and "Nothing was saved" in message  # and how
    assert not (sandbox_config_dir / "settings.json").exists()  # nothing, not even the timeout
    status = await api("GET", "api/sandbox/status")
    assert status.body["backend"] == "subprocess"

    # Not a confirmation: anything but true.
    for confirm in (False, None, "yes", 1):
        again = await api("PUT", "api/sandbox/config", {"backend": "off", "confirm": confirm})
        assert again.code in (400, 409), (confirm, again.text)
    switched = await api("PUT", "api/sandbox/config", {"backend": "off", "confirm": True})
    assert switched.code == 200, switched.text
    assert switched.body["backend"] == "off"
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())
    assert saved["sandbox"] == {"backend": "off"}  # confirm is no setting: never saved
    # Already off, or any other change: nothing to confirm.
    assert (await api("PUT", "api/sandbox/config", {"timeout_sec": 20})).code == 200
    assert (await api("PUT", "api/sandbox/config", {"backend": "off"})).code == 200
    back = await api("PUT", "api/sandbox/config", {"backend": "subprocess"})
    assert back.code == 200 and back.body["backend"] == "subprocess"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"backend": "x"}, "unknown_backend"),
        ({"timeout_sec": 0}, "invalid_setting"),
        ({"matrixlab_url": "ftp://x"}, "invalid_setting"),
        ({"timeout_sec": "30"}, "invalid_type"),
        ({"colour": "red"}, "unknown_field"),
    ],
)
async def test_config_refuses_bad_values_and_writes_nothing(
    api: Api, sandbox_config_dir: Path, body: dict[str, object], code: str
) -> None:
    answer = await api("PUT", "api/sandbox/config", {"timeout_sec": 30, **body})
    assert (answer.code, answer.body["code"]) == (400, code)
    assert not (sandbox_config_dir / "settings.json").exists()


async def test_token_never_appears_in_any_response(
    api: Api, monkeypatch: pytest.MonkeyPatch, jp_root_dir: Path
) -> None:
    await api("PUT", "api/sandbox/config", {"matrixlab_token": SECRET})
    monkeypatch.setenv("GITPILOT_MATRIXLAB_TOKEN", SECRET + "-env")
    (jp_root_dir / "a.py").write_text("print(1)\n")
    texts = [
        (await api("GET", "api/sandbox/status")).text,
        (await api("GET", "api/sandbox/config")).text,
        (await api("PUT", "api/sandbox/config", {"timeout_sec": 20})).text,
        (await api("PUT", "api/sandbox/config", {"matrixlab_token": 5})).text,
        (await api("POST", PLAN, {"file": "a.py"})).text,
        (await api("GET", "api/sandbox/plans")).text,
        (await api("POST", "api/sandbox/run", {"language": "python", "code": "1"})).text,
    ]
    for text in texts:
        assert SECRET not in text


@pytest.mark.parametrize("jp_server_config", [OFF_ALLOWED], indirect=True)
async def test_env_override_is_reported_and_never_saved(
    api: Api, monkeypatch: pytest.MonkeyPatch, sandbox_config_dir: Path
) -> None:
    await api("PUT", "api/sandbox/config", {"backend": "subprocess"})
    monkeypatch.setenv("GITPILOT_SANDBOX", "off")
    status = await api("GET", "api/sandbox/status")
    assert status.body["env_override"] == "GITPILOT_SANDBOX"
    assert status.body["backend"] == "off"
    await api("PUT", "api/sandbox/config", {"timeout_sec": 45})
    saved = json.loads((sandbox_config_dir / "settings.json").read_text())
    assert saved["sandbox"]["backend"] == "subprocess"

    monkeypatch.setenv("GITPILOT_SANDBOX", "bogus")
    status = await api("GET", "api/sandbox/status")
    assert status.body["env_override"] == "GITPILOT_SANDBOX"
    assert status.body["ok"] is False and "bogus" in status.body["error"]
    plan = await api("POST", PLAN, {"language": "python", "code": "1"})
    assert (plan.code, plan.body["code"]) == (400, "unknown_backend")


async def test_status_describes_the_live_sandbox(api: Api) -> None:
    status = await api("GET", "api/sandbox/status")
    assert status.code == 200
    body = status.body
    assert body["backend"] == "subprocess" and body["ok"] is True
    assert body["require_approval"] is True
    assert "tempdir" in body["isolation"]
    assert body["settings_error"] is None and body["env_override"] is None
