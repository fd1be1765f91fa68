"""Saving a run's files: one folder, never outside it, never over a file without force."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.rich.saving import (
    OutputFolder,
    SaveRefused,
    default_output_dir,
    display_image,
)


def test_a_write_lands_in_the_folder_made_for_it(tmp_path: Path) -> None:
    folder = OutputFolder(tmp_path / "sandbox-out" / "run_1")
    path = folder.write("plots/figure.png", b"\x89PNG")
    assert path == tmp_path / "sandbox-out" / "run_1" / "plots" / "figure.png"
    assert path.read_bytes() == b"\x89PNG"
    assert default_output_dir("run_1", tmp_path) == tmp_path / "sandbox-out" / "run_1"


@pytest.mark.parametrize(
    "name", ["../escaped.png", "a/../../escaped.png", "/etc/escaped", "a//b", "./a", "", "a\x00b"]
)
def test_a_name_that_leaves_the_folder_is_refused(tmp_path: Path, name: str) -> None:
    root = tmp_path / "out"
    with pytest.raises(SaveRefused, match="not saved"):
        OutputFolder(root).write(name, b"x")
    assert not (tmp_path / "escaped.png").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) in ([], ["out"])


def test_an_existing_file_is_kept_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "figure.png").write_bytes(b"old")
    with pytest.raises(SaveRefused, match=r"already exists \(--force replaces it\)"):
        OutputFolder(tmp_path).write("figure.png", b"new")
    assert (tmp_path / "figure.png").read_bytes() == b"old"
    OutputFolder(tmp_path, force=True).write("figure.png", b"new")
    assert (tmp_path / "figure.png").read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["figure.png"]  # no temporary file left


def test_no_link_in_the_folder_is_followed_even_forced(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_bytes(b"precious")
    root = tmp_path / "out"
    root.mkdir()
    (root / "sub").symlink_to(outside, target_is_directory=True)
    (root / "leaf").symlink_to(outside / "target")
    for force in (False, True):
        with pytest.raises(SaveRefused, match="is a link or not a folder"):
            OutputFolder(root, force=force).write("sub/new.png", b"x")
    with pytest.raises(SaveRefused, match="already exists"):
        OutputFolder(root).write("leaf", b"x")
    with pytest.raises(SaveRefused, match="not a regular file"):
        OutputFolder(root, force=True).write("leaf", b"x")
    assert (root / "leaf").is_symlink()
    assert sorted(p.name for p in outside.iterdir()) == ["target"]
    assert (outside / "target").read_bytes() == b"precious"


def test_a_fifo_or_a_folder_in_the_way_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dir").mkdir()
    for name in ("pipe", "dir"):
        with pytest.raises(SaveRefused):
            OutputFolder(tmp_path).write(name, b"x")
        with pytest.raises(SaveRefused, match="not a regular file"):
            OutputFolder(tmp_path, force=True).write(name, b"x")
    assert (tmp_path / "pipe").is_fifo()


def test_display_image_decodes_the_first_image_of_a_bundle() -> None:
    png = b"\x89PNG\r\n\x1a\n"
    item = {"data": {"text/plain": "<Figure>", "image/png": base64.b64encode(png).decode()}}
    assert display_image(item) == (".png", png)
    assert display_image({"data": {"image/svg+xml": "<svg/>"}}) == (".svg", b"<svg/>")
    assert display_image({"data": {"text/html": "<b>x</b>"}}) is None
    assert display_image({"data": {"image/png": "not base64!"}}) is None
