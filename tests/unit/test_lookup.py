"""The lookup behind the hidden paths: what os.path says, and a re-check that misses nothing.

:class:`Lookup` answers what ``os.path.isdir``/``isfile`` + ``os.path.realpath`` answer
for a path (the hidden credential paths and the covered secrets are worked out with
it), and :meth:`Lookup.current` tells whether those answers still hold, from one
``lstat`` per path it looked at. The warm pool keeps a slot only while the host's
view is what it was when the slot started; these tests show the re-check never says
"still the same" when a new lookup would answer differently.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gitpilot_jupyter.sandbox.local.lookup import MAX_LINKS, Lookup


def expected(path: str) -> tuple[str, int] | None:
    """What the old code asked ``os.path``: the real path and kind of an existing path."""
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)
    except OSError:
        return None
    return os.path.realpath(path), kind


def identity(path: str) -> tuple[int, int] | None:
    """Which file ``path`` is, as the old code asked (``os.stat``)."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


Answer = tuple[tuple[str, int] | None, tuple[int, int] | None]


def answers(lookup: Lookup, paths: list[str]) -> list[Answer]:
    return [(lookup.resolve(p), lookup.identity(p)) for p in paths]


def truth(paths: list[str]) -> list[Answer]:
    return [(expected(p), identity(p)) for p in paths]


# -- the same answers as os.path ------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "home" / ".ssh").mkdir(parents=True)
    (root / "home" / ".netrc").write_text("machine x")
    (root / "keys" / "deep").mkdir(parents=True)
    (root / "keys" / "file").write_text("k")
    (root / "abs").symlink_to(root / "keys")
    (root / "rel").symlink_to("keys/deep")
    (root / "up").symlink_to("keys/deep/..")  # .. after a folder: the folder's parent
    (root / "keys" / "back").symlink_to("../home")
    (root / "chain").symlink_to("abs")
    (root / "dangling").symlink_to("nowhere")
    (root / "loop1").symlink_to("loop2")
    (root / "loop2").symlink_to("loop1")
    (root / "slash").symlink_to("keys/file/")  # a trailing slash: must be a folder
    (root / "viafile").symlink_to("keys/file/..")
    long = root / "long0"
    long.mkdir()
    for i in range(MAX_LINKS + 1):  # a chain of 41 links: the kernel gives up (ELOOP)
        (root / f"long{i + 1}").symlink_to(f"long{i}")
    for i in range(1, MAX_LINKS):
        (root / f"ok{i}").symlink_to("long0" if i == 1 else f"ok{i - 1}")
    return root


CASES = [
    "home",
    "home/.ssh",
    "home/.netrc",
    "home/.netrc/",
    "home/.netrc/.",
    "home/.netrc/..",
    "home/.ssh/../.netrc",
    "home//.ssh/",
    "home/./.ssh",
    "missing",
    "missing/..",
    "abs",
    "abs/deep",
    "abs/back/.ssh",
    "abs/back/../file",
    "rel",
    "rel/..",
    "up",
    "chain/deep/../back/.netrc",
    "dangling",
    "dangling/x",
    "loop1",
    "loop1/x",
    "slash",
    "viafile",
    f"long{MAX_LINKS}",
    f"long{MAX_LINKS + 1}",
    f"ok{MAX_LINKS - 1}",
    "../root/home/.ssh",
    "/",
    "/..",
]


@pytest.mark.parametrize("case", CASES)
def test_the_answer_is_what_os_path_gives(tree: Path, case: str) -> None:
    path = case if case.startswith("/") else f"{tree}/{case}"
    assert answers(Lookup(), [path]) == truth([path])


@pytest.mark.parametrize("name", ["nul\0byte", "lone\ud800surrogate"])
def test_a_name_no_path_can_have_names_nothing(tree: Path, name: str) -> None:
    # (An environment given as a dict could hold one; os.path.isdir says False.)
    path = f"{tree}/home/{name}"
    assert not os.path.isdir(path) and not os.path.isfile(path)
    assert Lookup().folders([path]) == set() and Lookup().files([path]) == set()


def test_a_relative_path_is_resolved_in_the_working_folder(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree / "keys")
    lookup = Lookup()
    assert lookup.folders(["back/.ssh", "deep", "file"]) == {
        os.path.realpath(tree / "home" / ".ssh"),
        os.path.realpath(tree / "keys" / "deep"),
    }
    assert lookup.files(["back/.netrc", "deep"]) == {os.path.realpath(tree / "home" / ".netrc")}
    assert lookup.current()
    monkeypatch.chdir(tree / "home")  # the same relative paths name other things now
    assert not lookup.current()


# -- each change a credential path can undergo is seen ---------------------------------------


def changed(lookup: Lookup, paths: list[str], before: list[Answer]) -> None:
    """The change gave other answers, and the old lookup says it is no longer current."""
    assert answers(Lookup(), paths) != before
    assert not lookup.current()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "h1").mkdir()
    (tmp_path / "home").symlink_to("h1")  # $HOME itself a symlink, as on some hosts
    return tmp_path / "home"


def test_a_folder_made_removed_replaced_or_made_a_file_is_seen(home: Path) -> None:
    paths = [str(home / ".ssh"), str(home / ".config" / "gcloud")]

    def file_to_folder() -> None:
        (home / ".ssh").unlink()
        (home / ".ssh").mkdir()

    def replace() -> None:  # the same path, another folder (what a cover is tied to)
        os.rename(home / ".ssh", home / ".ssh.old")
        (home / ".ssh").mkdir()

    for change in (
        lambda: (home / ".ssh").mkdir(),
        lambda: (home / ".ssh").rmdir(),
        lambda: (home / ".config" / "gcloud").mkdir(parents=True),
        lambda: shutil.rmtree(home / ".config"),
        lambda: (home / ".ssh").write_text("a file where a folder was"),
        file_to_folder,
        replace,
    ):
        lookup = Lookup()
        before = answers(lookup, paths)
        assert lookup.current()
        change()
        changed(lookup, paths, before)


def test_a_folder_replaced_by_a_link_or_a_link_re_pointed_is_seen(home: Path) -> None:
    keys, other = home.parent / "keys", home.parent / "other"
    keys.mkdir()
    other.mkdir()
    (home / ".ssh").mkdir()
    paths = [str(home / ".ssh")]

    def relink(target: Path) -> None:
        os.rename(home / ".ssh", home.parent / "gone")  # (a folder or a link)
        (home / ".ssh").symlink_to(target)
        shutil.rmtree(home.parent / "gone") if (home.parent / "gone").is_dir() and not (
            home.parent / "gone"
        ).is_symlink() else os.unlink(home.parent / "gone")

    for target in (keys, other, Path("../keys")):
        lookup = Lookup()
        before = answers(lookup, paths)
        relink(target)
        changed(lookup, paths, before)


def test_a_re_pointed_parent_link_is_seen(home: Path) -> None:
    (home.parent / "h2" / ".ssh").mkdir(parents=True)
    paths = [str(home / ".ssh")]
    lookup = Lookup()
    before = answers(lookup, paths)
    assert before == [(None, None)]
    (home.parent / "next").symlink_to("h2")
    os.rename(home.parent / "next", home)  # $HOME re-pointed (atomically)
    changed(lookup, paths, before)
    lookup = Lookup()
    before = answers(lookup, paths)
    (home.parent / "h1" / ".ssh").mkdir()
    os.unlink(home)
    home.symlink_to(home.parent / "h1")  # back, now to a tree that has one too
    changed(lookup, paths, before)


def test_a_parent_replaced_by_rename_is_seen(home: Path) -> None:
    (home / ".aws").mkdir()
    paths = [str(home / ".aws"), str(home / ".kube")]
    lookup = Lookup()
    before = answers(lookup, paths)
    os.rename(home.parent / "h1", home.parent / "h1.old")
    (home.parent / "h1" / ".kube").mkdir(parents=True)  # made again: another folder
    changed(lookup, paths, before)


def test_a_link_in_the_middle_of_a_link_target_is_seen(tmp_path: Path) -> None:
    # home -> a/b/h, where a/b is itself a link: changing a/b moves home's target.
    (tmp_path / "x" / "h").mkdir(parents=True)
    (tmp_path / "y" / "h" / ".gnupg").mkdir(parents=True)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "b").symlink_to("../x")
    (tmp_path / "home").symlink_to("a/b/h")
    paths = [str(tmp_path / "home" / ".gnupg")]
    lookup = Lookup()
    before = answers(lookup, paths)
    os.unlink(tmp_path / "a" / "b")
    (tmp_path / "a" / "b").symlink_to("../y")
    changed(lookup, paths, before)


def test_nothing_changed_is_current_and_costs_one_look_per_path(home: Path) -> None:
    (home / ".ssh").mkdir()
    lookup = Lookup()
    lookup.folders([str(home / ".ssh"), str(home / ".aws")])
    assert lookup.current()
    # Every path on the way, the link and its target's: nothing more, nothing less.
    assert set(lookup.seen) == {
        *(str(p) for p in list(home.parent.parents)[:-1]),
        str(home.parent),
        str(home),
        str(home.parent / "h1"),
        str(home.parent / "h1" / ".ssh"),
        str(home.parent / "h1" / ".aws"),
    }


# -- searched for: whatever the tree and the changes, current() means the same answers -------

NAMES = ["a", "b", "c"]
#: Where a change is made: below the root, through whatever links are there.
WHERE = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
#: What is looked up, and where links point (relative, absolute, with .. and /).
REL = st.lists(st.sampled_from([*NAMES, "..", "."]), min_size=1, max_size=3).map("/".join)
TARGET = st.one_of(
    REL, REL.map(lambda p: p + "/"), REL.map(lambda p: "{root}/" + p), st.just("/nonexistent")
)
OP = st.one_of(
    st.tuples(st.sampled_from(["mkdir", "file", "remove"]), WHERE),
    st.tuples(st.sampled_from(["link", "relink"]), WHERE, TARGET),
    st.tuples(st.just("rename"), WHERE, WHERE),
)


def within(root: str, path: str) -> bool:
    """True when ``path``'s folder is ``root`` or below it (as the links are now)."""
    real = os.path.realpath(os.path.dirname(path))
    return real == root or real.startswith(root + "/")


def apply(root: str, op: tuple[str, ...]) -> None:
    """Make one change below ``root`` (never outside it, whatever the links say)."""
    path = os.path.join(root, op[1])
    if not within(root, path) or (op[0] == "rename" and not within(root, f"{root}/{op[2]}")):
        return
    try:
        if op[0] == "mkdir":
            os.mkdir(path)
        elif op[0] == "file":
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW))
        elif op[0] == "link":
            os.symlink(op[2].format(root=root), path)
        elif op[0] == "relink":  # re-pointed in one step (ln -sfn)
            os.symlink(op[2].format(root=root), f"{root}/new")
            os.rename(f"{root}/new", path)
        elif op[0] == "remove":
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        else:
            os.rename(path, f"{root}/{op[2]}")
    except OSError:
        pass  # a change that cannot be made in this tree: none


@contextlib.contextmanager
def scratch() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield os.path.realpath(tmp)


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    build=st.lists(OP, max_size=8),
    change=st.lists(OP, min_size=1, max_size=3),
    queries=st.lists(REL, min_size=1, max_size=4),
)
def test_current_means_a_new_lookup_gives_the_same_answers(
    build: list[tuple[str, ...]], change: list[tuple[str, ...]], queries: list[str]
) -> None:
    with scratch() as root:
        for op in build:
            apply(root, op)
        paths = [f"{root}/{q}" for q in queries]
        lookup = Lookup()
        before = answers(lookup, paths)
        assert before == truth(paths)
        assert lookup.current()
        for op in change:
            apply(root, op)
        now = truth(paths)
        assert answers(Lookup(), paths) == now
        if lookup.current():
            assert now == before
