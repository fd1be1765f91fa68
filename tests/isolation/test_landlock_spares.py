"""The rulesets built ahead (``nsfree.SPARES``): a run's wall is the one built now would be.

Real Landlock rulesets applied to real processes: a spare gives exactly its run's
folder (never the folder of the run whose cleanup built it), and a spare whose
folder or file was replaced since it was built is not used.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local import nsfree
from gitpilot_jupyter.sandbox.local.landlock import FsRules, Wall, interpreter_rules

from .test_landlock import TRY_READ, walled


@pytest.fixture
def spares() -> Iterator[nsfree._Spares]:
    own = nsfree._Spares()
    yield own
    own.close()


def made(top: Path, *names: str) -> list[Path]:
    """New folders ``names`` in ``top``."""
    for name in names:
        (top / name).mkdir()
    return [top / name for name in names]


def rules_for(run: Path, shared: Path) -> FsRules:
    return FsRules(execute=interpreter_rules(), read=(str(shared),), write=(str(run),))


def test_a_spare_gives_its_run_folder_and_not_the_one_before(
    tmp_path: Path, spares: nsfree._Spares
) -> None:
    shared, first, second = (tmp_path / n for n in ("shared", "first", "second"))
    for folder in (shared, first, second):
        folder.mkdir()
        (folder / "note").write_text(folder.name)
    spares.make_ahead(rules_for(first, shared), deny_tcp=True, scoped=True)
    fd = spares.ruleset(rules_for(first, shared), deny_tcp=True, scoped=True)
    assert not spares._ready  # the spare was taken
    spares.make_ahead(rules_for(first, shared), deny_tcp=True, scoped=True)  # first's cleanup
    walled(Wall(fd), TRY_READ, str(first / "note"))
    fd = spares.ruleset(rules_for(second, shared), deny_tcp=True, scoped=True)
    assert not spares._ready
    paths = [str(p / "note") for p in (shared, first, second)]
    seen = walled(Wall(fd), TRY_READ, *paths).stdout.splitlines()
    assert seen == [f"{paths[0]} shared", f"{paths[1]} PermissionError", f"{paths[2]} second"]


def test_a_spare_whose_folder_was_replaced_is_not_used(
    tmp_path: Path, spares: nsfree._Spares
) -> None:
    shared, run = made(tmp_path, "shared", "run")
    spares.make_ahead(rules_for(run, shared), deny_tcp=True, scoped=True)
    os.rename(shared, tmp_path / "old")  # an atomic replace: same path, another folder
    shared.mkdir()
    (shared / "note").write_text("new")
    fd = spares.ruleset(rules_for(run, shared), deny_tcp=True, scoped=True)
    seen = walled(Wall(fd), TRY_READ, str(shared / "note")).stdout
    assert seen == f"{shared / 'note'} new\n"


def test_a_spare_whose_entry_of_a_split_folder_was_saved_over_is_not_used(
    tmp_path: Path, spares: nsfree._Spares
) -> None:
    # A folder split around a secret (as /etc is): its entries are rules of their own,
    # and a spare knows them by the folder's state. An atomic save of one is seen.
    etc, run = made(tmp_path, "etc", "run")
    (etc / "secret").write_text("secret")
    (etc / "hosts").write_text("old")
    entries = nsfree.allowed_under([etc], [etc / "secret"])
    assert entries == [etc / "hosts"]
    rules = FsRules(execute=interpreter_rules(), read=tuple(map(str, entries)), write=(str(run),))
    spares.make_ahead(rules, deny_tcp=True, scoped=True)
    (etc / "hosts.new").write_text("new")
    os.rename(etc / "hosts.new", etc / "hosts")
    fd = spares.ruleset(rules, deny_tcp=True, scoped=True)
    paths = [str(etc / "hosts"), str(etc / "secret")]
    seen = walled(Wall(fd), TRY_READ, *paths).stdout.splitlines()
    assert seen == [f"{paths[0]} new", f"{paths[1]} PermissionError"]
