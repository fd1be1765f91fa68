"""The warm pool's re-check of the host: every change to a credential path retires slots.

A slot is handed out only while the host's view (:meth:`LayeredIsolator.fingerprint`)
is what it was when the slot started. The view is kept between runs and looked at
again with one ``lstat`` per path it depends on (:meth:`LayeredIsolator.host_view`).
The first tests make each kind of change and compare the kept view with one worked
out from nothing; the others show a waiting slot is not used after such a change.
(A folder made after the slot started, and one replaced by a rename, have their own
tests in ``test_pool.py`` and ``containment/test_redteam_pool.py``.)
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.results import RunResult
from tests.support.system import require_system

from .conftest import require_mechanism
from .pooling import pooled, request, scenario, the_pool, until


def relink(link: Path, target: Path | str) -> None:
    """Point ``link`` at ``target`` in one step, as ``ln -sfn`` does."""
    new = link.with_name(link.name + ".new")
    new.symlink_to(target)
    os.rename(new, link)


# -- the kept view is the one worked out from nothing, after each kind of change ------------


def test_each_change_to_a_credential_path_changes_the_kept_view_as_a_new_one(
    tmp_path: Path,
) -> None:
    require_mechanism("bwrap")
    # An "interpreter" in a folder of its own: that folder is in every run's view, so
    # credentials below it get covered (elsewhere they would need no cover).
    tree = tmp_path / "tree"
    tree.mkdir()
    exe = tree / "python"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    argv = [str(exe), "inline.py"]
    home = tree / "home"
    (tree / "h1").mkdir()
    home.symlink_to("h1")  # $HOME is a link, as on some hosts
    environ = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    isolator = LayeredIsolator("bwrap", environ=environ)
    first = isolator.fingerprint(argv, allow_network=False)
    require_system("bwrap", first is not None, "no bubblewrap chain (no warm slots) here")
    for name in ("keys1", "keys2", "h2", "x", "y"):
        (tree / name).mkdir()

    def swap_parent() -> None:
        os.rename(tree / "h2", tree / "h2.old")
        (tree / "h2" / ".docker").mkdir(parents=True)

    def middle() -> None:
        (tree / "x" / "h" / ".gnupg").mkdir(parents=True)
        (tree / "mid").symlink_to("x")
        relink(home, "mid/h")

    def unlink_and_mkdir(path: Path) -> None:
        path.unlink()
        path.mkdir()

    def replace(folder: Path) -> None:
        os.rename(folder, folder.with_name(folder.name + ".old"))
        folder.mkdir()

    changes: list[tuple[str, Callable[[], object]]] = [
        ("a folder made", lambda: (home / ".ssh").mkdir()),
        ("a file made", lambda: (home / ".netrc").write_text("machine x")),
        ("a folder removed", lambda: (home / ".ssh").rmdir()),
        ("a file removed", lambda: (home / ".netrc").unlink()),
        ("a link made", lambda: (home / ".aws").symlink_to(tree / "keys1")),
        ("a link re-pointed", lambda: relink(home / ".aws", "../keys2")),
        ("a link re-pointed to nothing", lambda: relink(home / ".aws", "../none")),
        ("a link made a folder", lambda: unlink_and_mkdir(home / ".aws")),
        ("a folder replaced by rename", lambda: replace(home / ".aws")),
        ("the home link re-pointed", lambda: relink(home, "h2")),
        ("a folder made in the new home", lambda: (home / ".kube").mkdir()),
        ("the home's folder replaced by rename", swap_parent),
        ("the home made a file", lambda: relink(home, "python")),
        ("a link in a link's target", middle),
        ("the middle re-pointed", lambda: relink(tree / "mid", "y")),
        ("a folder made in its target", lambda: (tree / "y" / "h" / ".gnupg").mkdir(parents=True)),
    ]
    before = first
    for what, change in changes:
        change()
        kept = isolator.fingerprint(argv, allow_network=False)
        new = LayeredIsolator("bwrap", environ=environ).fingerprint(argv, allow_network=False)
        assert kept == new, what
        assert kept != before, f"{what}: the view did not change"
        assert isolator.fingerprint(argv, allow_network=False) == kept, what
        before = kept
    # And a change to nothing the view depends on keeps it.
    (tree / "unrelated").mkdir()
    (home / "notes.txt").write_text("x")
    assert isolator.fingerprint(argv, allow_network=False) == before


# -- a waiting slot is not used after such a change ------------------------------------------


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder in a tree every run sees (the interpreter's), removed afterwards."""
    if not os.access(sys.prefix, os.W_OK):
        pytest.skip("the interpreter's folder is not writable by this user")
    folder = Path(sys.prefix) / f".gitpilot-recheck-{secrets.token_hex(4)}"
    folder.mkdir(mode=0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def secret(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    token = folder / "token"
    token.write_text(text)
    token.chmod(0o644)
    return token


def after_a_change(
    backend: SubprocessSandbox, change: Callable[[], object], code: str
) -> tuple[list[RunResult], int]:
    """Warm up, change the host while a slot waits, run ``code``: the results, stale count."""
    results: list[RunResult] = []
    stale = []

    async def body(backend: SubprocessSandbox) -> None:
        pool = the_pool(backend)
        results.append(await backend.run(request("print('warming')")))
        await until(lambda: pool.idle() >= 1)
        change()
        results.append(await backend.run(request(code)))
        stale.append(pool.stats["stale"])

    scenario(body, backend)
    return results, stale[0]


@pytest.mark.parametrize(("variable", "holds"), [("GITPILOT_CONFIG_DIR", "."), ("HOME", ".ssh")])
def test_a_link_re_pointed_while_a_slot_waits_is_followed(
    base: Path, variable: str, holds: str
) -> None:
    # ``variable`` names a link to ``a``, then to ``b``, whose ``holds`` is a credential
    # folder: hidden from then on, visible to a slot made before (``b`` is in its view).
    (base / "a").mkdir()
    token = secret(base / "b" / holds, "s3cret-b")
    link = base / "link"
    link.symlink_to("a")
    environ = {**os.environ, variable: str(link)}
    results, stale = after_a_change(
        pooled(environ=environ), lambda: relink(link, "b"), f"print(open({str(token)!r}).read())"
    )
    assert "s3cret-b" not in results[1].stdout + results[1].stderr
    assert results[1].exit_code != 0 and not results[1].warm and stale >= 1


def test_a_credential_folder_removed_while_a_slot_waits_retires_it(base: Path) -> None:
    folder = base / "config"
    secret(folder, "gone")
    environ = {**os.environ, "GITPILOT_CONFIG_DIR": str(folder)}
    results, stale = after_a_change(
        pooled(environ=environ),
        lambda: shutil.rmtree(folder),
        f"import os; print(os.path.exists({str(folder)!r}))",
    )
    # The slot covered a folder that is no more: the run goes cold and sees none.
    assert results[1].stdout == "False\n" and not results[1].warm and stale >= 1


def test_a_credential_file_made_while_a_slot_waits_is_hidden(base: Path) -> None:
    home = base / "home"
    home.mkdir()
    netrc = home / ".netrc"
    environ = {**os.environ, "HOME": str(home)}

    def make() -> None:
        netrc.write_text("machine example.invalid login me password s3cret-netrc")
        netrc.chmod(0o644)

    results, stale = after_a_change(
        pooled(environ=environ), make, f"print(open({str(netrc)!r}).read())"
    )
    # Covered (bubblewrap's /dev/null, which a run may not open), as a cold run has it; a
    # slot made before would read it.
    assert "s3cret-netrc" not in results[1].stdout + results[1].stderr
    assert "PermissionError" in results[1].stderr, results[1].stderr
    assert results[1].exit_code != 0 and not results[1].warm and stale >= 1
