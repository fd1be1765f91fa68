"""Policy rules: destructive patterns, secrets, proxies, timeouts; languages; output cap."""

from __future__ import annotations

import pytest

from gitpilot_jupyter.sandbox.errors import InvalidRequest, PolicyViolation, UnknownLanguage
from gitpilot_jupyter.sandbox.languages import canonical_language
from gitpilot_jupyter.sandbox.output import CappedText, cap_text
from gitpilot_jupyter.sandbox.policy import (
    ENV_ALLOWLIST_ENV,
    ENV_PASSTHROUGH_ENV,
    SandboxPolicy,
    env_names,
    find_destructive,
)


@pytest.mark.parametrize(
    "text",
    [
        "rm -rf /",
        "rm -rf /*",
        "rm -fr /",
        "sudo rm -rf / ",
        "echo hi; rm -Rf /",
        "rm -rf --no-preserve-root /",
        "mkfs.ext4 /dev/sda1",
        "mkfs /dev/sdb",
        "dd if=/dev/zero of=/dev/sda",
        ":(){ :|:& };:",
        "shutdown -h now",
        "shutdown -r now",
    ],
)
def test_destructive_patterns_are_found(text: str) -> None:
    assert find_destructive(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "rm -rf /tmp/x",
        "rm -rf ./build",
        "rm -r notes",
        "echo mkfs-is-a-word-here",
        "firm -rf /",
        "grep shutdown logfile",
        "ls /",
    ],
)
def test_harmless_commands_are_not_refused(text: str) -> None:
    assert find_destructive(text) is None


def test_bash_text_is_checked_but_python_text_only_warns() -> None:
    policy = SandboxPolicy()
    with pytest.raises(PolicyViolation) as info:
        policy.check_destructive("bash", "rm -rf /", ["bash", "inline.sh"])
    assert "rm -rf /" in str(info.value)
    policy.check_destructive("python", "print('rm -rf /')", ["python", "inline.py"])


def test_the_environment_is_an_allowlist() -> None:
    env = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "GITHUB_TOKEN": "a",
        "DATABASE_URL": "postgres://u:p@db/x",
        "MYSQL_PWD": "d",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "GH_PAT": "ghp",
        "SSH_PRIVATE_KEY": "-----BEGIN",
        "HTTPS_PROXY": "http://proxy",
        "http_proxy": "http://proxy",
        "HOME": "/root",
    }
    scrubbed = SandboxPolicy(allowed_vars=frozenset()).scrub_env(env, allow_network=False)
    assert scrubbed == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TZ": "UTC"}
    with_net = SandboxPolicy(allowed_vars=frozenset()).scrub_env(env, allow_network=True)
    assert with_net["HTTPS_PROXY"] == "http://proxy" and "GITHUB_TOKEN" not in with_net
    assert "DATABASE_URL" not in with_net and "HOME" not in with_net


def test_names_pass_only_when_the_administrator_or_the_caller_names_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {"PATH": "/bin", "DATABASE_URL": "x", "GH_PAT": "y", "OTHER": "z"}
    monkeypatch.setenv(ENV_PASSTHROUGH_ENV, "DATABASE_URL, ")
    monkeypatch.setenv(ENV_ALLOWLIST_ENV, "GH_PAT")
    policy = SandboxPolicy()
    assert policy.allowed_vars == {"DATABASE_URL"}
    assert policy.scrub_env(env, allow_network=False) == {"PATH": "/bin", "DATABASE_URL": "x"}
    named = policy.caller_env(["GH_PAT"])
    assert policy.scrub_env(env, allow_network=False, passthrough=named) == {
        "PATH": "/bin",
        "DATABASE_URL": "x",
        "GH_PAT": "y",
    }
    for bad in ("GH_PAT", ["A=B"], ["1X"], [3], [f"V{i}" for i in range(65)]):
        with pytest.raises(InvalidRequest) as info:
            env_names(bad)
        assert info.value.code == "invalid_env"


def test_timeout_defaults_and_range() -> None:
    policy = SandboxPolicy()
    assert policy.timeout(None, 120) == 120
    assert policy.timeout(5, 120) == 5
    for bad in (0, 601, -3, "5", 2.5, True):
        with pytest.raises(InvalidRequest) as info:
            policy.timeout(bad, 120)
        assert info.value.code == "invalid_timeout"


@pytest.mark.parametrize(
    ("alias", "canonical"),
    [
        ("py", "python"),
        (" Python3 ", "python"),
        ("JS", "javascript"),
        ("node", "javascript"),
        ("nodejs", "javascript"),
        ("sh", "bash"),
        ("shell", "bash"),
    ],
)
def test_language_aliases(alias: str, canonical: str) -> None:
    assert canonical_language(alias) == canonical


@pytest.mark.parametrize("name", ["ruby", "", "pyth on", None, 3])
def test_unknown_language(name: object) -> None:
    with pytest.raises(UnknownLanguage) as info:
        canonical_language(name)
    assert info.value.code == "unknown_language"


def test_cap_cuts_on_a_character_boundary() -> None:
    text, truncated = cap_text("é" * 10, cap=5)  # 2 bytes each: 2 whole characters fit
    assert (text, truncated) == ("éé", True)
    text, truncated = cap_text("abc", cap=5)
    assert (text, truncated) == ("abc", False)


def test_capped_stream_keeps_split_characters_whole_across_chunks() -> None:
    sink = CappedText(cap=100)
    data = "ü€x".encode()
    for i in range(len(data)):
        sink.feed(data[i : i + 1])
    sink.finish()
    assert sink.text == "ü€x" and not sink.truncated


def test_capped_stream_discards_beyond_the_cap() -> None:
    sink = CappedText(cap=10)
    assert sink.feed(b"0123456789abc") == "0123456789"
    assert sink.feed(b"more") == ""
    assert sink.truncated and sink.kept == 10
