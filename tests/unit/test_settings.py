"""Settings: defaults, precedence, env override, masking, atomic writes, corrupt files."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.errors import InvalidSetting, UnknownBackend
from gitpilot_jupyter.sandbox.settings import (
    ALLOWED_BACKENDS_ENV,
    SettingsStore,
    allowed_backends_from_env,
    parse_setting,
)


def store(folder: Path, **env: str) -> SettingsStore:
    return SettingsStore(folder, environ=env)


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    eff = store(tmp_path).effective()
    assert eff.settings.backend == "subprocess"
    assert eff.settings.matrixlab_url == "http://localhost:8765"
    assert eff.settings.timeout_sec == 120
    assert eff.settings.allow_network is False
    assert eff.env_override is None and eff.settings_error is None


def test_env_beats_file_and_names_the_override(tmp_path: Path) -> None:
    store(tmp_path).update({"backend": "off"})
    eff = store(tmp_path, GITPILOT_SANDBOX="matrixlab").effective()
    assert eff.settings.backend == "matrixlab"
    assert eff.env_override == "GITPILOT_SANDBOX"
    assert store(tmp_path).effective().settings.backend == "off"


def test_env_override_is_the_first_var_set_in_contract_order(tmp_path: Path) -> None:
    eff = store(
        tmp_path, GITPILOT_MATRIXLAB_IMAGE="img:1", GITPILOT_MATRIXLAB_URL="http://runner:8765"
    ).effective()
    assert eff.env_override == "GITPILOT_MATRIXLAB_URL"
    assert eff.settings.matrixlab_url == "http://runner:8765"
    assert eff.settings.matrixlab_image == "img:1"


def test_empty_env_var_does_not_win(tmp_path: Path) -> None:
    store(tmp_path).update({"backend": "off"})
    eff = store(tmp_path, GITPILOT_SANDBOX="").effective()
    assert eff.settings.backend == "off" and eff.env_override is None


def test_unknown_backend_in_env_is_reported_not_replaced(tmp_path: Path) -> None:
    eff = store(tmp_path, GITPILOT_SANDBOX="docker").effective()
    assert eff.env_override == "GITPILOT_SANDBOX"
    assert eff.env_error is not None and "'docker'" in eff.env_error


def test_unknown_backend_refused_with_the_contract_message(tmp_path: Path) -> None:
    with pytest.raises(UnknownBackend) as info:
        store(tmp_path).update({"backend": "x"})
    assert str(info.value) == (
        "unknown sandbox backend 'x'; expected one of ['matrixlab', 'off', 'subprocess']"
    )
    assert not (tmp_path / "settings.json").exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("timeout_sec", 0),
        ("timeout_sec", 601),
        ("timeout_sec", "60"),
        ("timeout_sec", True),
        ("allow_network", "yes"),
        ("matrixlab_url", "ftp://runner"),
        ("matrixlab_url", "localhost:8765"),
        ("colour", "blue"),
    ],
)
def test_invalid_values_are_refused_and_nothing_is_written(
    tmp_path: Path, key: str, value: object
) -> None:
    store(tmp_path).update({"timeout_sec": 30})
    before = (tmp_path / "settings.json").read_text()
    with pytest.raises(InvalidSetting):
        store(tmp_path).update({"backend": "off", key: value})
    assert (tmp_path / "settings.json").read_text() == before


def test_token_is_masked_and_cleared_by_empty_string(tmp_path: Path) -> None:
    s = store(tmp_path)
    s.update({"matrixlab_token": "s3cret-token"})
    masked = s.effective().settings.masked()
    assert masked["has_token"] is True
    assert "s3cret-token" not in json.dumps(masked)
    assert "matrixlab_token" not in masked
    s.update({"matrixlab_token": ""})
    assert s.effective().settings.masked()["has_token"] is False
    assert "matrixlab_token" not in json.loads((tmp_path / "settings.json").read_text())["sandbox"]


def test_env_token_is_never_persisted(tmp_path: Path) -> None:
    s = store(tmp_path, GITPILOT_MATRIXLAB_TOKEN="from-env-token")
    assert s.effective().settings.matrixlab_token == "from-env-token"
    s.update({"backend": "matrixlab", "timeout_sec": 30})
    text = (tmp_path / "settings.json").read_text()
    assert "from-env-token" not in text
    assert json.loads(text)["sandbox"] == {"backend": "matrixlab", "timeout_sec": 30}


def test_other_top_level_keys_are_preserved(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(
        json.dumps({"llm": {"provider": "ollama"}, "sandbox": {"timeout_sec": 10}})
    )
    store(tmp_path).update({"backend": "off"})
    doc = json.loads((tmp_path / "settings.json").read_text())
    assert doc["llm"] == {"provider": "ollama"}
    assert doc["sandbox"] == {"timeout_sec": 10, "backend": "off"}


def test_file_is_0600_in_a_0700_folder(tmp_path: Path) -> None:
    folder = tmp_path / "fresh"
    store(folder).update({"backend": "off"})
    assert stat.S_IMODE(os.stat(folder / "settings.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    leftovers = [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_corrupt_file_is_survived_reported_and_kept_aside(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text("{not json")
    eff = store(tmp_path).effective()
    assert eff.settings.backend == "subprocess"
    assert eff.settings_error and "not valid JSON" in eff.settings_error
    store(tmp_path).update({"backend": "off"})
    kept = list(tmp_path.glob("settings.json.bad-*"))
    assert len(kept) == 1 and kept[0].read_text() == "{not json"
    assert store(tmp_path).effective().settings.backend == "off"


def test_invalid_value_in_file_is_ignored_and_reported(tmp_path: Path) -> None:
    (tmp_path / "settings.json").write_text(
        json.dumps({"sandbox": {"backend": "docker", "timeout_sec": 30}})
    )
    eff = store(tmp_path).effective()
    assert eff.settings.backend == "subprocess"
    assert eff.settings.timeout_sec == 30
    assert eff.settings_error and "backend" in eff.settings_error


def test_config_dir_follows_env(tmp_path: Path) -> None:
    s = SettingsStore(environ={"GITPILOT_CONFIG_DIR": str(tmp_path / "cfg")})
    assert s.path == tmp_path / "cfg" / "settings.json"


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [("timeout_sec", "30", 30), ("allow_network", "on", True), ("backend", "off", "off")],
)
def test_parse_setting_types_text(key: str, text: str, value: object) -> None:
    assert parse_setting(key, text) == value


@pytest.mark.parametrize(
    ("value", "approval", "lifecycle"),
    [("", True, False), ("0", False, False), ("OFF ", False, False), ("yes", True, True),
     ("1", True, True), ("maybe", True, False)],
)  # fmt: skip
def test_env_flags_read_the_same_words_everywhere(
    value: str, approval: bool, lifecycle: bool
) -> None:
    from gitpilot_jupyter.sandbox.matrixlab.config import LIFECYCLE_FLAG, lifecycle_enabled
    from gitpilot_jupyter.sandbox.service import REQUIRE_APPROVAL_ENV, approval_required_by_env

    # Unset or not a flag word: each flag keeps its safe default (approval on, lifecycle off).
    assert approval_required_by_env({REQUIRE_APPROVAL_ENV: value}) is approval
    assert lifecycle_enabled({LIFECYCLE_FLAG: value}) is lifecycle


def test_key_value_words_are_parsed_once_for_every_face() -> None:
    from gitpilot_jupyter.sandbox.errors import InvalidRequest
    from gitpilot_jupyter.sandbox.settings import parse_assignments

    changes = parse_assignments(["allow_network=on", "timeout_sec= 30"], what="--set")
    assert changes == {"allow_network": True, "timeout_sec": 30}
    with pytest.raises(InvalidRequest, match="config takes KEY=VALUE, got 'timeout_sec'"):
        parse_assignments(["allow_network=1", "timeout_sec"], what="config")


def _write(path: Path, timeout: int) -> None:
    path.write_text(json.dumps({"sandbox": {"timeout_sec": timeout}, "ui": {"x": 1}}))


def test_a_kept_settings_file_is_read_again_whenever_it_changes(tmp_path: Path) -> None:
    settings = store(tmp_path)
    settings.unsettled_ns = 0  # keep every read (by default a fresh file is not kept)
    reads: list[int] = []
    original = settings._read_document

    def counted() -> tuple[dict[str, object], str | None]:
        reads.append(1)
        return original()

    settings._read_document = counted  # type: ignore[method-assign]
    path = tmp_path / "settings.json"
    _write(path, 30)
    assert settings.effective().settings.timeout_sec == 30
    assert settings.effective().settings.timeout_sec == 30
    assert len(reads) == 1  # unchanged: parsed once
    store(tmp_path).update({"timeout_sec": 45})  # another writer (atomic replace)
    assert settings.effective().settings.timeout_sec == 45
    # An editor writing in place, same size, its modification time put back: seen.
    before = path.stat()
    path.write_text(path.read_text().replace("45", "46"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert settings.effective().settings.timeout_sec == 46
    path.unlink()
    assert settings.effective().settings.timeout_sec == 120
    _write(path, 50)
    assert settings.effective().settings.timeout_sec == 50
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _write(elsewhere / "settings.json", 60)
    moved = SettingsStore(environ={"GITPILOT_CONFIG_DIR": str(elsewhere)})
    moved.unsettled_ns = 0
    assert moved.effective().settings.timeout_sec == 60
    # A later edit that breaks the file is reported at once, not hidden by the kept one.
    path.write_text("{not json")
    eff = settings.effective()
    assert eff.settings.timeout_sec == 120
    assert eff.settings_error is not None and "not valid JSON" in eff.settings_error


def test_a_file_written_twice_within_a_moment_gives_its_last_content(tmp_path: Path) -> None:
    settings = store(tmp_path)  # the default: a file changed just now is not kept
    path = tmp_path / "settings.json"
    for timeout in (31, 32, 33, 34):
        _write(path, timeout)  # same size, the same clock tick as likely as not
        assert settings.effective().settings.timeout_sec == timeout
        assert settings.effective().settings.timeout_sec == timeout


def test_the_kept_values_are_copies(tmp_path: Path) -> None:
    settings = store(tmp_path)
    settings.unsettled_ns = 0
    _write(tmp_path / "settings.json", 30)
    values, _ = settings.persisted()
    values["timeout_sec"] = 99
    assert settings.persisted()[0]["timeout_sec"] == 30
    # The environment is applied to each call's own copy, never to what is kept.
    env: dict[str, str] = {}
    settings = SettingsStore(tmp_path, environ=env)
    settings.unsettled_ns = 0
    assert settings.effective().settings.timeout_sec == 30
    env["GITPILOT_SANDBOX"] = "off"
    assert settings.effective().settings.backend == "off"
    del env["GITPILOT_SANDBOX"]
    assert settings.effective().settings.backend == "subprocess"


def test_kept_effective_settings_follow_every_variable_file_and_folder_at_once(
    tmp_path: Path,
) -> None:
    env: dict[str, str] = {}
    settings = SettingsStore(tmp_path, environ=env)
    settings.unsettled_ns = 0
    first = settings.effective()
    assert settings.effective() is first  # nothing changed: kept, not worked out again
    # Each variable the settings read: set, changed, made invalid, removed, each seen at once.
    for var, key, value, other in (
        ("GITPILOT_SANDBOX", "backend", "off", "matrixlab"),
        ("GITPILOT_MATRIXLAB_URL", "matrixlab_url", "http://a:1", "http://b:2"),
        ("GITPILOT_MATRIXLAB_TOKEN", "matrixlab_token", "t1", "t2"),
        ("GITPILOT_MATRIXLAB_IMAGE", "matrixlab_image", "img:1", "img:2"),
    ):
        default = getattr(first.settings, key)
        for text in (value, other):
            env[var] = text
            eff = settings.effective()
            assert getattr(eff.settings, key) == text
            assert eff.env_override == var and eff.from_env == (key,)
        env[var] = "two words"
        eff = settings.effective()
        assert eff.env_error is not None and var in eff.env_error
        del env[var]
        eff = settings.effective()
        assert getattr(eff.settings, key) == default
        assert eff.env_override is None and eff.env_error is None
    # A file that appears, changes and goes: seen by the next call.
    path = tmp_path / "settings.json"
    _write(path, 30)
    assert settings.effective().settings.timeout_sec == 30
    kept = settings.effective()
    assert settings.effective() is kept
    store(tmp_path).update({"timeout_sec": 45})
    assert settings.effective().settings.timeout_sec == 45
    path.unlink()
    assert settings.effective().settings.timeout_sec == 120
    # The folder named by GITPILOT_CONFIG_DIR: moving it moves the settings at once.
    moving: dict[str, str] = {}
    followed = SettingsStore(environ=moving)
    followed.unsettled_ns = 0
    for timeout, name in ((61, "a"), (62, "b"), (61, "a")):
        (tmp_path / name).mkdir(exist_ok=True)
        _write(tmp_path / name / "settings.json", timeout)
        moving["GITPILOT_CONFIG_DIR"] = str(tmp_path / name)
        assert followed.effective().settings.timeout_sec == timeout


def test_kept_effective_settings_cannot_be_changed_by_a_caller(tmp_path: Path) -> None:
    import dataclasses

    settings = store(tmp_path)
    eff = settings.effective()
    with pytest.raises(dataclasses.FrozenInstanceError):
        eff.settings.timeout_sec = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        eff.env_error = "x"  # type: ignore[misc]
    assert settings.effective().settings.timeout_sec == 120


def test_a_fresh_file_is_never_kept_by_the_effective_settings(tmp_path: Path) -> None:
    settings = store(tmp_path)  # the default: a file changed just now is not kept
    _write(tmp_path / "settings.json", 31)
    first = settings.effective()
    assert first.settings.timeout_sec == 31
    assert settings.effective() is not first  # read again: an edit in this tick is not lost


def test_the_allowed_backends_leave_off_out_unless_listed() -> None:
    assert allowed_backends_from_env({}) == ("subprocess", "matrixlab")
    assert "off" not in allowed_backends_from_env({ALLOWED_BACKENDS_ENV: " "})
    listed = {ALLOWED_BACKENDS_ENV: "off,subprocess docker off"}
    assert allowed_backends_from_env(listed) == ("off", "subprocess")  # no such backend: ignored
    typo = {ALLOWED_BACKENDS_ENV: "docker"}
    assert allowed_backends_from_env(typo) == ("subprocess", "matrixlab")
