"""A session cell's rich outputs, in the item shape of the rich-output contract.

A kernel's ``display_data`` and ``execute_result`` messages become the items a run's
``RunResult.outputs`` will carry (``{"output_type": "display_data", "data", "metadata",
"stdout_at"}``), checked as the contract checks a run's frames: the MIME allowlist,
valid base64 for binary types, caps per item, per cell and in number. A message that
breaks a rule is dropped with one sentence in the result's notes. The kernel is the
sandbox's: nothing it sends is trusted.

The shared rich core (``sandbox/rich``, issue #31) is not on main yet: when it lands,
these rules are its, and this module keeps only :func:`from_message`.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

#: The stream name of a streamed item (``on_output(DISPLAY_STREAM, json.dumps(item))``).
DISPLAY_STREAM = "display"
TEXT_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml")
BINARY_TYPES = ("image/png", "image/jpeg", "image/gif")
JSON_TYPE = "application/json"
ALLOWED_TYPES = (*TEXT_TYPES, *BINARY_TYPES, JSON_TYPE)
#: Caps: one item's size, all of a cell's items together, and how many.
ITEM_CAP_BYTES = 2_000_000
CELL_CAP_BYTES = 8_000_000
MAX_ITEMS = 64


def _valid(mime: str, value: Any) -> bool:
    if mime == JSON_TYPE:
        return True
    if not isinstance(value, str):
        return False
    if mime in BINARY_TYPES:
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return False
    return True


@dataclass
class CellOutputs:
    """The items of one cell, and the notes of what was dropped."""

    items: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    size: int = 0

    def add(self, content: Any, *, stdout_at: int) -> dict[str, Any] | None:
        """The item of a ``display_data`` / ``execute_result`` content, kept; None
        (and a note) when it breaks a rule."""
        data = content.get("data") if isinstance(content, dict) else None
        metadata = content.get("metadata") if isinstance(content, dict) else None
        if not isinstance(data, dict):
            self._drop("a display without data was dropped")
            return None
        kept = {m: v for m, v in data.items() if m in ALLOWED_TYPES and _valid(m, v)}
        if len(kept) < len(data):
            left = sorted(set(map(str, data)) - set(kept))
            self.notes.append(f"display types not shown (not allowed or not valid): {left}")
        if not kept:
            return None
        item = {
            "output_type": "display_data",
            "data": kept,
            "metadata": metadata if isinstance(metadata, dict) else {},
            "stdout_at": stdout_at,
        }
        size = len(json.dumps(item))
        if len(self.items) >= MAX_ITEMS:
            self._drop(f"a display was dropped: a cell shows at most {MAX_ITEMS}")
            return None
        if size > ITEM_CAP_BYTES:
            self._drop(f"a display of {size} bytes was dropped (at most {ITEM_CAP_BYTES})")
            return None
        if self.size + size > CELL_CAP_BYTES:
            self._drop(f"a display was dropped: a cell's displays total {CELL_CAP_BYTES}")
            return None
        self.size += size
        self.items.append(item)
        return item

    def _drop(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)
