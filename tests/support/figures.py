"""A figure the tests draw in the sandbox, and how they know it came back whole.

The snippet draws a 4x3-inch figure at 50 dpi filled red (200x150 pixels before the
display shim's tight crop); a PNG that decodes, about that size and red at its centre
is that figure, wherever it was saved or shown.
"""

from __future__ import annotations

import importlib.util
import io

from tests.support.system import require_system

#: Python that draws the red figure and shows it (``plt.show()``).
RED_FIGURE = """\
import matplotlib.pyplot as plt
plt.figure(figsize=(4, 3), dpi=50)
plt.fill_between([0, 1], [1, 1], color="#ff0000")
plt.show()
"""


def require_matplotlib() -> None:
    """matplotlib draws in the sandbox (the same Python) and Pillow reads the PNG here."""
    found = importlib.util.find_spec("matplotlib") and importlib.util.find_spec("PIL")
    require_system("matplotlib", found is not None, "pip install matplotlib")


def assert_red_figure(png: bytes) -> tuple[int, int]:
    """Check ``png`` is the red figure; answer its size."""
    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        assert image.format == "PNG"
        width, height = image.size
        assert 150 <= width <= 210 and 100 <= height <= 160 and width > height, image.size
        assert image.convert("RGB").getpixel((width // 2, height // 2)) == (255, 0, 0)
        return width, height
