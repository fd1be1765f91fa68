"""The built lab extension is installed with the package and enabled (no browser needed)."""

from __future__ import annotations

import re
import subprocess
import sys


def test_labextension_list_shows_it_enabled() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter", "labextension", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    # jupyter writes the listing to stderr; strip the colour codes.
    text = re.sub(r"\x1b\[[0-9;]*m", "", listing.stdout + listing.stderr)
    assert re.search(r"gitpilot-jupyter v\S+ enabled OK", text), text
