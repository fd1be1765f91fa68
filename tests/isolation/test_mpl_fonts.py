"""matplotlib's font list in real runs of both file-system engines, cold and warm: the
server's copy is used (no font scan in the run), a run's writes reach only its own copy,
and a figure with a title still draws its text."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import pytest

from gitpilot_jupyter.sandbox.local import mplfonts

from .test_rich_output import ENGINES, run

pytest.importorskip("matplotlib")

MODES = ["cold", "warm", "prestart"]
#: matplotlib logs which list it loaded, or that it scanned the fonts.
USED = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
import matplotlib.font_manager as fm
fm.findfont("DejaVu Sans")
print(fm.fontManager.ttflist and "fonts listed")
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_run_uses_the_servers_font_list(engine: str, mode: str) -> None:
    result = run(engine, USED, mode)
    assert result.exit_code == 0, result.stderr
    assert "generated new fontManager" not in result.stdout + result.stderr
    assert "fonts listed" in result.stdout


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_run_cannot_change_the_shared_copy(engine: str, mode: str) -> None:
    shared = mplfonts.shared_font_list(sys.executable)
    assert shared is not None
    before = shared.read_bytes()
    code = f"""
import glob, os
for path in glob.glob(".matplotlib/fontlist-v*.json") + [{str(shared)!r}]:
    try:
        with open(path, "w") as file:
            file.write("{{}}")
        print("wrote", os.path.realpath(path))
    except OSError as exc:
        print("refused", exc.errno)
"""
    result = run(engine, code, mode)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("wrote ") and lines[0].endswith(shared.name)  # its own copy
    assert lines[1].startswith("refused")
    assert shared.read_bytes() == before
    assert json.loads(before)["ttflist"]
    # The next run still gets a whole list.
    assert "generated new fontManager" not in run(engine, USED, mode).stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_every_listed_font_is_readable_in_a_run(engine: str) -> None:
    shared = mplfonts.shared_font_list(sys.executable)
    assert shared is not None
    names = [e["fname"] for e in json.loads(shared.read_text())["ttflist"]]
    # (matplotlib's own fonts are listed relative to its data folder)
    code = (
        "import os, matplotlib\n"
        "base = matplotlib.get_data_path()\n"
        f"print(len({names!r}), [n for n in {names!r}\n"
        "       if not os.access(os.path.join(base, n), os.R_OK)])\n"
    )
    result = run(engine, code)
    assert result.stdout.split() == [str(len(names)), "[]"], result.stdout


@pytest.mark.parametrize("engine", ENGINES)
def test_a_titled_figure_still_draws_its_text(engine: str) -> None:
    code = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(2, 1), dpi=50)
ax.axis("off")
ax.set_title("WWWW", fontsize=20);
"""
    blank = code.replace('ax.set_title("WWWW", fontsize=20);', "")
    inked = []
    for snippet in (code, blank):
        result = run(engine, snippet)
        assert result.exit_code == 0, result.stderr
        assert "generated new fontManager" not in result.stderr
        (item,) = (o for o in result.outputs if "image/png" in o["data"])
        inked.append(_dark_pixels(base64.b64decode(item["data"]["image/png"])))
    assert inked[0] > inked[1] + 20  # the title's glyphs


def _dark_pixels(data: bytes) -> int:
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("L")
    return sum(image.histogram()[:128])


def test_no_matplotlib_no_list(tmp_path: Path) -> None:
    bare = tmp_path / "python"
    bare.write_text('#!/bin/sh\nexec /usr/bin/python3 -I -S "$@"\n')
    bare.chmod(0o755)
    assert mplfonts.shared_font_list(str(bare)) is None
    assert not mplfonts.place_font_list(str(bare), tmp_path)
    assert not (tmp_path / mplfonts.RUN_CONFIG_DIR).exists()
