"""Files in (``--input PATH``) through the core: what the plan binds, what is refused,
and what a real run finds in its folder."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.errors import ApprovalError, InputRefused, InvalidRequest
from gitpilot_jupyter.sandbox.inputs import InputCaps, resolve_inputs, stage_inputs
from gitpilot_jupyter.sandbox.policy import SandboxPolicy
from gitpilot_jupyter.sandbox.request import Caller, RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import SettingsStore
from gitpilot_jupyter.sandbox.spec import RunSpec, plan_digest

CSV = "region,sales\nnorth,12\nsouth,30\n"
READ_CSV = (
    "import csv\n"
    "rows = list(csv.DictReader(open('sales.csv')))\n"
    "print(sum(int(r['sales']) for r in rows))\n"
)
CAPS = InputCaps()


def sha(data: str) -> str:
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A notebook's folder: a CSV, a folder of data, and things that must not go in."""
    (tmp_path / "sales.csv").write_text(CSV)
    (tmp_path / "data" / "deep").mkdir(parents=True)
    (tmp_path / "data" / "a.txt").write_text("alpha\n")
    (tmp_path / "data" / "deep" / "b.txt").write_text("beta\n")
    return tmp_path


def test_each_input_is_named_sized_and_hashed(project: Path) -> None:
    found = resolve_inputs(project, ["sales.csv", "data"], caps=CAPS)
    csv, data = found
    assert (csv.name, csv.kind, csv.size, csv.sha256) == ("sales.csv", "file", len(CSV), sha(CSV))
    # A folder's hash is over its sorted `relpath\0size\0hex` lines.
    lines = "".join(
        f"{rel}\0{len(text)}\0{hashlib.sha256(text.encode()).hexdigest()}\n"
        for rel, text in sorted({"a.txt": "alpha\n", "deep/b.txt": "beta\n"}.items())
    )
    assert (data.name, data.kind, data.files, data.size) == ("data", "dir", 2, 11)
    assert data.sha256 == "sha256:" + hashlib.sha256(lines.encode()).hexdigest()
    assert csv.label().startswith("input sales.csv · 31 B · sha256:")


def test_the_digest_binds_inputs_and_only_when_there_are_some(tmp_path: Path) -> None:
    base: dict[str, Any] = {
        "language": "python",
        "code": "print(1)",
        "stdin": None,
        "timeout_sec": 30,
        "network": False,
        "backend": "subprocess",
    }
    spec = RunSpec(**base)
    # The digest of a plan without inputs is the one it always was.
    assert spec.digest == plan_digest(**base)
    assert (
        spec.digest
        == "sha256:"
        + hashlib.sha256(
            b'{"backend": "subprocess", "code": "print(1)", "language": "python", '
            b'"network": false, "stdin": null, "timeout_sec": 30}'
        ).hexdigest()
    )
    digests = {spec.digest}
    for text in ("x,y\n", "x,z\n"):
        (tmp_path / "t.csv").write_text(text)
        digests.add(RunSpec(**base, inputs=resolve_inputs(tmp_path, ["t.csv"], caps=CAPS)).digest)
    assert len(digests) == 3


def test_a_symlink_out_of_the_tree_is_refused_naming_it(project: Path, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-secret.txt"
    outside.write_text("the user's secret\n")
    os.symlink(outside, project / "data" / "leak.txt")
    with pytest.raises(InputRefused) as refused:
        resolve_inputs(project, ["data"], caps=CAPS)
    assert refused.value.code == "input_symlink"
    assert "data/leak.txt" in refused.value.message and str(outside) in refused.value.message
    # At the top, too: a link under the root to a file outside it.
    os.remove(project / "data" / "leak.txt")
    os.symlink(outside, project / "top.txt")
    with pytest.raises(InputRefused) as top:
        resolve_inputs(project, ["top.txt"], caps=CAPS)
    assert top.value.code == "input_symlink" and "'top.txt'" in top.value.message


def test_a_symlink_inside_the_tree_is_its_file(project: Path) -> None:
    os.symlink("a.txt", project / "data" / "again.txt")
    (data,) = resolve_inputs(project, ["data"], caps=CAPS)
    assert data.files == 3 and data.size == len("alpha\n") * 2 + len("beta\n")


@pytest.mark.parametrize(
    ("paths", "code"),
    [
        (["missing.csv"], "invalid_input"),
        (["../elsewhere.csv"], "invalid_input"),
        (["fifo"], "invalid_input"),
        (["inline.py"], "input_name_clash"),
        (["out"], "input_name_clash"),
        (["sales.csv", "data/../sales.csv"], "input_name_clash"),
    ],
)
def test_refusals_have_their_own_codes(project: Path, paths: list[str], code: str) -> None:
    (project.parent / "elsewhere.csv").write_text("x\n")
    os.mkfifo(project / "fifo")
    (project / "inline.py").write_text("print()\n")
    (project / "out").mkdir()
    with pytest.raises((InputRefused, InvalidRequest)) as refused:
        resolve_inputs(project, paths, reserved=["inline.py"], caps=CAPS)
    assert refused.value.code == code


def test_a_fifo_inside_a_folder_is_refused(project: Path) -> None:
    os.mkfifo(project / "data" / "pipe")
    with pytest.raises(InputRefused, match="data/pipe"):
        resolve_inputs(project, ["data"], caps=CAPS)


def test_the_caps_on_bytes_and_files(project: Path) -> None:
    with pytest.raises(InvalidRequest) as files:
        resolve_inputs(project, ["data", "sales.csv"], caps=InputCaps(max_files=2))
    assert files.value.code == "inputs_too_many_files"
    with pytest.raises(InvalidRequest) as size:
        resolve_inputs(project, ["sales.csv"], caps=InputCaps(max_bytes=len(CSV) - 1))
    assert size.value.code == "inputs_too_large" and "30 B" in size.value.message
    assert resolve_inputs(project, ["sales.csv"], caps=InputCaps(max_bytes=len(CSV)))


def test_a_credential_folder_is_refused(project: Path) -> None:
    ssh = project / ".ssh"
    ssh.mkdir()
    with pytest.raises(InputRefused) as held:
        resolve_inputs(project, ["."], hidden=[ssh.resolve()], caps=CAPS)
    assert held.value.code == "input_hidden" and ".ssh" in held.value.message


def test_staging_copies_read_only_and_catches_a_change(project: Path, tmp_path: Path) -> None:
    found = resolve_inputs(project, ["sales.csv", "data"], caps=CAPS)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    csv, data = stage_inputs(found, private)
    assert csv.path.read_text() == CSV and (data.path / "deep" / "b.txt").read_text() == "beta\n"
    assert csv.path.stat().st_mode & 0o777 == 0o444
    again = tmp_path / "again"
    again.mkdir(mode=0o700)
    (project / "data" / "deep" / "b.txt").write_text("BETA\n")  # same size, other bytes
    with pytest.raises(ApprovalError) as changed:
        stage_inputs(found, again)
    assert changed.value.code == "approval_mismatch" and "'data'" in changed.value.message


# -- through the service: real runs on this host's engine --------------------------------


def test_a_snippet_reads_the_csv_it_was_given(service: SandboxService, project: Path) -> None:
    options = RunOptions(language="python", code=READ_CSV, inputs=("sales.csv",))
    planned = asyncio.run(service.plan_and_run(options, confirmed=True))
    labels = [c["label"] for c in planned.plan.checks]
    assert any(label.startswith("input sales.csv · 31 B · sha256:") for label in labels)
    assert any("at most 100 MB and 1000 files in all" in label for label in labels)
    assert planned.plan.to_dict()["inputs"] == [
        {"name": "sales.csv", "kind": "file", "size": 31, "sha256": sha(CSV), "files": 1}
    ]
    assert planned.result is not None
    assert (planned.result.exit_code, planned.result.stdout) == (0, "42\n")


def test_a_folder_input_keeps_its_tree(service: SandboxService, project: Path) -> None:
    code = (
        "import os\n"
        "print(open('data/deep/b.txt').read(), end='')\n"
        "print(sorted(os.listdir('data')))\n"
    )
    options = RunOptions(language="python", code=code, inputs=("data",))
    planned = asyncio.run(service.plan_and_run(options, confirmed=True))
    assert planned.result is not None and planned.result.stdout == "beta\n['a.txt', 'deep']\n"


def test_a_file_changed_after_approval_is_approval_mismatch(
    sandbox_config_dir: Path, project: Path
) -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir),
        root_dir=project,
        audit=lambda e, d: events.append((e, d)),
    )
    options = RunOptions(language="python", code=READ_CSV, inputs=("sales.csv",))

    async def plan_approve_edit_run() -> None:
        plan = await service.plan(options)
        token = (await service.approve(plan.plan_id))["approval_token"]
        (project / "sales.csv").write_text(CSV.replace("30", "31"))
        with pytest.raises(ApprovalError) as refused:
            await service.run(token)
        assert refused.value.code == "approval_mismatch"
        assert "'sales.csv' changed after the plan was approved" in refused.value.message
        # Nothing ran, the token was not spent: put the file back and it runs.
        (project / "sales.csv").write_text(CSV)
        result = await service.run(token)
        assert result.stdout == "42\n"

    asyncio.run(plan_approve_edit_run())
    assert [e for e, _ in events].count("refused") == 1
    assert [e for e, _ in events].count("run") == 1


def test_the_long_form_hashes_the_inputs_again(service: SandboxService, project: Path) -> None:
    options = RunOptions(language="python", code=READ_CSV, inputs=("sales.csv",))

    async def long_form() -> str:
        plan = await service.plan(options)
        token = (await service.approve(plan.plan_id))["approval_token"]
        (project / "sales.csv").write_text(CSV + "east,1\n")
        with pytest.raises(ApprovalError) as refused:
            await service.run(token, Caller(), expected=options)
        return refused.value.code

    assert asyncio.run(long_form()) == "approval_mismatch"


def test_the_policy_caps_reach_the_plan(sandbox_config_dir: Path, project: Path) -> None:
    service = SandboxService(
        settings=SettingsStore(sandbox_config_dir),
        root_dir=project,
        policy=SandboxPolicy(max_input_bytes=10),
    )
    options = RunOptions(language="python", code="pass", inputs=("sales.csv",))
    with pytest.raises(InvalidRequest) as refused:
        asyncio.run(service.plan(options))
    assert refused.value.code == "inputs_too_large"


def test_a_name_with_control_characters_is_shown_escaped(project: Path) -> None:
    odd = "sales\x1b[2J.csv"
    (project / odd).write_text(CSV)
    (found,) = resolve_inputs(project, [odd], caps=CAPS)
    assert found.name == odd  # the run folder gets the file's own name
    assert "\x1b" not in found.label() and "sales\\x1b[2J.csv" in found.label()


def test_an_absolute_path_inside_the_root_is_named_relative(project: Path) -> None:
    (found,) = resolve_inputs(project, [str(project / "data")], caps=CAPS)
    assert (found.name, found.given) == ("data", "data")
    os.mkfifo(project / "data" / "pipe")
    with pytest.raises(InputRefused) as refused:
        resolve_inputs(project, [str(project / "data")], caps=CAPS)
    assert "'data/pipe'" in refused.value.message and str(project) not in refused.value.message


def test_an_input_may_not_take_the_name_a_file_run_runs_under(
    service: SandboxService, project: Path
) -> None:
    (project / "job.py").write_text("print()\n")
    named = RunOptions(language="python", code="print()", filename="job.py", inputs=("job.py",))
    with pytest.raises(InvalidRequest) as clash:
        asyncio.run(service.plan(named))
    assert clash.value.code == "input_name_clash"
    file_run = RunOptions(file="job.py", inputs=("job.py",))
    with pytest.raises(InvalidRequest) as again:
        asyncio.run(service.plan(file_run))
    assert again.value.code == "input_name_clash"


def test_a_sessions_input_may_not_take_a_name_its_folder_holds(
    service: SandboxService, project: Path
) -> None:
    (project / ".packages").mkdir()
    cell = RunOptions(language="python", code="print()", session="s1", inputs=(".packages",))
    with pytest.raises(InvalidRequest) as clash:
        asyncio.run(service.plan(cell))
    assert clash.value.code == "input_name_clash"
    # The same name in a single run is only a folder's.
    run = RunOptions(language="python", code="print()", inputs=(".packages",))
    assert asyncio.run(service.plan(run)).spec.inputs[0].name == ".packages"


def test_a_folder_past_the_file_cap_is_not_walked_to_its_end(project: Path) -> None:
    many = project / "many"
    many.mkdir()
    for n in range(11):
        (many / f"a{n:02}.txt").write_text("x")
    os.mkfifo(many / "zzz")  # after the files: refused only if the walk got that far
    with pytest.raises(InvalidRequest) as capped:
        resolve_inputs(project, ["many"], caps=InputCaps(max_files=10))
    assert capped.value.code == "inputs_too_many_files"
    with pytest.raises(InputRefused, match="zzz"):
        resolve_inputs(project, ["many"], caps=CAPS)
