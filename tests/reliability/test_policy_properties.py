"""Property-based tests of the policy: destructive patterns, languages, settings, the output cap.

Where the unit tests check listed examples, these let hypothesis search for a
counter-example: a spelling of ``rm -rf /`` that slips through, a harmless
command refused, an alias not canonicalised, a setting accepted out of range,
a settings write that breaks the file, an output cap that is off by one byte.
"""

from __future__ import annotations

import json
import string

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gitpilot_jupyter.sandbox.errors import (
    InvalidSetting,
    PolicyViolation,
    UnknownBackend,
    UnknownLanguage,
)
from gitpilot_jupyter.sandbox.languages import CANONICAL_LANGUAGES, canonical_language
from gitpilot_jupyter.sandbox.output import CappedText
from gitpilot_jupyter.sandbox.plans import plan_digest
from gitpilot_jupyter.sandbox.policy import SandboxPolicy, find_destructive, never_passed
from gitpilot_jupyter.sandbox.settings import (
    BACKENDS,
    FIELD_NAMES,
    SettingsStore,
    validate_setting,
)

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

blank = st.text(alphabet=" \t", min_size=1, max_size=3)
#: Text around a command in a script: anything that ends/starts at a shell word boundary.
before = st.sampled_from(["", "echo hi; ", "true && ", "x=1\n", "(", "sudo ", "`"])
after = st.sampled_from(["", "; echo done", " && true", "\n", ")", " # bye", "`"])


@st.composite
def rm_root(draw: st.DrawFn) -> str:
    """``rm`` with recursive + force flags in any spelling, aimed at ``/`` or ``/*``."""
    flags = draw(
        st.sampled_from(
            [
                *("-rf", "-fr", "-Rf", "-fR", "-rfv", "-vrf", "-frv", "-rfi"),
                *("-r -f", "-f -r", "-R -f", "--recursive --force", "--force -r", "-r --force"),
            ]
        )
    )
    extra = draw(st.sampled_from(["", "--no-preserve-root ", "-v ", "--verbose "]))
    target = draw(st.sampled_from(["/", "/*"]))
    return f"rm{draw(blank)}{extra}{flags}{draw(blank)}{target}"


@st.composite
def other_destructive(draw: st.DrawFn) -> str:
    return draw(
        st.sampled_from(
            [
                "mkfs.ext4 /dev/sda1",
                "mkfs -t ext4 /dev/sdb",
                "dd if=/dev/zero of=/dev/sda",
                "dd bs=1M if=/dev/zero of=/dev/sda",
                ":(){ :|:& };:",
                ":() { : | : & } ; :",
                "shutdown -h now",
                "shutdown -r +5",
                "shutdown --no-wall -h now",
            ]
        )
    )


@FAST
@given(before, st.one_of(rm_root(), other_destructive()), after)
def test_destructive_commands_are_always_refused(pre: str, command: str, post: str) -> None:
    script = pre + command + post
    assert find_destructive(script) is not None, script
    with pytest.raises(PolicyViolation) as refused:
        SandboxPolicy().check_destructive("bash", script, ["bash", "inline.sh"])
    assert refused.value.code == "destructive_pattern"


path_part = st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=12)


@FAST
@given(before, st.lists(path_part, min_size=1, max_size=4), after)
def test_removing_a_folder_below_root_is_not_refused(pre: str, parts: list[str], post: str) -> None:
    assume(not all(p.strip(".") == "" for p in parts))
    command = "rm -rf /" + "/".join(parts)
    assert find_destructive(pre + command + post) is None, command


@FAST
@given(st.text(alphabet=string.ascii_letters + string.digits + " _-=.,:/", max_size=60))
def test_text_without_the_commands_is_never_refused(text: str) -> None:
    lowered = text.lower()
    assume(not any(word in lowered for word in ("rm", "mkfs", "dd", "shutdown")))
    assert find_destructive(text) is None


@FAST
@given(
    st.sampled_from(
        ["python", "py", "python3", "javascript", "js", "node", "nodejs", "bash", "sh", "shell"]
    ),
    st.text(alphabet=" \t\n", max_size=3),
    st.text(alphabet=" \t\n", max_size=3),
    st.data(),
)
def test_aliases_canonicalise_in_any_case_and_padding(
    alias: str, left: str, right: str, data: st.DataObject
) -> None:
    spelled = "".join(
        c.upper() if data.draw(st.booleans(), label=f"upper {i}") else c
        for i, c in enumerate(alias)
    )
    assert canonical_language(left + spelled + right) in CANONICAL_LANGUAGES
    assert canonical_language(left + spelled + right) == canonical_language(alias)


@FAST
@given(st.one_of(st.text(max_size=20), st.integers(), st.none(), st.lists(st.text(max_size=3))))
def test_anything_else_is_an_unknown_language(name: object) -> None:
    known = {"python", "py", "python3", "javascript", "js", "node", "nodejs", "bash", "sh", "shell"}
    assume(not (isinstance(name, str) and name.strip().lower() in known))
    with pytest.raises(UnknownLanguage):
        canonical_language(name)


@FAST
@given(st.sampled_from(["py", "python3", "PY", " Python "]), st.text(min_size=1, max_size=50))
def test_the_digest_sees_the_canonical_language(alias: str, code: str) -> None:
    common = {"code": code, "stdin": None, "timeout_sec": 5, "network": False, "backend": "x"}
    assert plan_digest(language=canonical_language(alias), **common) == plan_digest(
        language="python", **common
    )


setting_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.text(max_size=30),
    st.floats(allow_nan=True),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
RANGES = {
    "timeout_sec": (1, 600),
    "memory_limit_mb": (16, 65536),
    "max_processes": (8, 4096),
    "max_file_size_mb": (1, 65536),
    "disk_limit_mb": (16, 65536),
    "max_display_item_mb": (1, 64),
    "max_display_run_mb": (1, 512),
    "max_display_outputs": (1, 10000),
}


@FAST
@given(st.sampled_from(FIELD_NAMES), setting_values)
def test_settings_validation_accepts_only_what_the_contract_allows(key: str, value: object) -> None:
    try:
        stored = validate_setting(key, value)
    except (InvalidSetting, UnknownBackend) as exc:
        assert exc.message and exc.status == 400
        return
    if key == "backend":
        assert stored in BACKENDS
    elif key == "allow_network":
        assert isinstance(stored, bool)
    elif key in RANGES:
        low, high = RANGES[key]
        assert type(stored) is int and low <= stored <= high
    elif key == "matrixlab_url":
        assert isinstance(stored, str) and stored.startswith(("http://", "https://"))
    else:
        assert isinstance(stored, str)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.lists(
        st.dictionaries(st.sampled_from(FIELD_NAMES), setting_values, min_size=1, max_size=3),
        min_size=1,
        max_size=6,
    )
)
def test_any_sequence_of_updates_keeps_a_valid_file(
    tmp_path_factory: pytest.TempPathFactory, updates: list[dict[str, object]]
) -> None:
    folder = tmp_path_factory.mktemp("settings")
    (folder / "settings.json").write_text(json.dumps({"gitpilot": {"keep": True}}))
    store = SettingsStore(folder, environ={})
    expected: dict[str, object] = {}
    for changes in updates:
        try:
            store.update(changes)
        except (InvalidSetting, UnknownBackend):
            continue  # nothing of a refused update may reach the file
        expected.update({k: validate_setting(k, v) for k, v in changes.items()})
        if expected.get("matrixlab_token") == "":
            expected.pop("matrixlab_token")
    doc = json.loads((folder / "settings.json").read_text())
    assert doc["gitpilot"] == {"keep": True}
    assert doc["sandbox"] == expected if expected else doc.get("sandbox", {}) == {}
    assert store.effective().settings_error is None


@FAST
@given(
    st.lists(st.binary(max_size=300), max_size=20),
    st.integers(min_value=1, max_value=1500),
)
def test_the_output_cap_is_exact_and_never_splits_a_character(
    chunks: list[bytes], cap: int
) -> None:
    sink = CappedText(cap)
    for chunk in chunks:
        sink.feed(chunk)
    sink.finish()
    total = sum(len(c) for c in chunks)
    assert sink.kept <= cap
    assert sink.truncated == (total > cap)
    if not sink.truncated:
        assert sink.kept == total
    else:
        assert sink.kept >= cap - 3  # cut at most a partial 4-byte character early
    # Kept bytes decode to text whose UTF-8 form is no longer than the cap allows.
    assert len(sink.text.encode("utf-8")) <= sink.kept + 3 * sink.text.count("\ufffd")


def test_env_scrub_property_names() -> None:
    """Every name containing a secret word is stripped, whatever its case or position
    (the environment is an allowlist: only the base names and those named pass)."""

    @FAST
    @given(
        st.text(alphabet=string.ascii_letters + "_", max_size=8),
        st.sampled_from(["TOKEN", "SECRET", "PASSWORD", "API_KEY", "CREDENTIAL"]),
        st.text(alphabet=string.ascii_letters + "_", max_size=8),
    )
    def check(pre: str, word: str, post: str) -> None:
        name = pre + word.lower() if len(pre) % 2 else pre + word
        name += post
        assume(not never_passed(name))  # those never pass, even named (tested apart)
        policy = SandboxPolicy(allowed_vars=frozenset())
        env = policy.scrub_env({name: "s3cret", "PATH": "/bin"}, allow_network=True)
        assert name not in env and env["PATH"] == "/bin"
        assert name in policy.scrub_env({name: "x"}, allow_network=False, passthrough=[name])

    check()
