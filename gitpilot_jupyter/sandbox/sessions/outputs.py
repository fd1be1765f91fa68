"""A session cell's rich outputs: a kernel's message as the rich core's frame.

A kernel's ``display_data`` and ``execute_result`` messages are checked by the very
rules of a run's display frames (:class:`..rich.DisplayOutputs`: the MIME allowlist,
base64, the caps per item, per cell and in number, one note per reason). This module
only turns a message's content into the :class:`..rich.wire.Frame` those rules read.
The kernel is the sandbox's: nothing it sends is trusted.
"""

from __future__ import annotations

import json
from typing import Any

from ..rich.wire import Frame
from .boot import TOO_BIG_KEY


def frame_of(content: dict[str, Any], max_payload: int) -> Frame:
    """The frame of a ``display_data`` / ``execute_result`` content: its bundle
    (``data`` and ``metadata``) as JSON; past ``max_payload`` bytes (or sent as its size
    only by the kernel's bootstrap), only its size."""
    size = content.get(TOO_BIG_KEY)
    if isinstance(size, int):
        return Frame(max(size, max_payload + 1), None)
    bundle = {"data": content.get("data"), "metadata": content.get("metadata")}
    try:
        payload = json.dumps(bundle).encode("ascii")  # (a lone surrogate: an escape)
    except (TypeError, ValueError):
        payload = b"{}"  # (not JSON: dropped by the check, with its reason)
    if len(payload) > max_payload:
        return Frame(len(payload), None)
    return Frame(len(payload), payload)
