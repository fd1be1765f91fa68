"""Rich output: a run's display outputs as Jupyter MIME bundles, in order with its text.

In the sandbox a python run starts as ``python -c "<shim>" inline.py`` (the shim:
``shim.py``, restoring what ``python inline.py`` gives); it provides ``display()``, a
matplotlib backend and a notebook cell's last-expression rule, and writes each output
as a frame in its stdout (:mod:`.wire`; any language may). The server takes the frames
out before the output cap and checks each (:mod:`.bundles`); a kept output is::

    {"output_type": "display_data", "data": {...}, "metadata": {...}, "stdout_at": N}

``stdout_at``: the characters of the run's kept stdout before it. Outputs stream as
``on_output(DISPLAY_STREAM, json.dumps(item))`` (:func:`parse_display` reads one back)
and end in the envelope's ``outputs``. A view that trusts what it shows takes
:func:`for_trusted_view` of each.
"""

from __future__ import annotations

import json
from typing import Any

from .bundles import (
    ALLOWED_TYPES,
    OUTPUT_TYPE,
    DisplayCaps,
    DisplayOutputs,
    InlineImages,
    display_json,
    json_with_outputs,
)
from .trusted import for_trusted_view
from .wire import NONCE_ENV, is_shim_command, new_nonce, python_command, shim_env, shim_source

#: The stream name of a display output (``on_output``'s first argument).
DISPLAY_STREAM = "display"
#: What a plan says where no shim is sent (the ``matrixlab`` backend).
NOT_ON_MATRIXLAB = "rich output: not on matrixlab (only stdout and stderr come back)"

__all__ = [
    "ALLOWED_TYPES",
    "DISPLAY_STREAM",
    "NONCE_ENV",
    "NOT_ON_MATRIXLAB",
    "OUTPUT_TYPE",
    "DisplayCaps",
    "DisplayOutputs",
    "InlineImages",
    "encode_display",
    "for_trusted_view",
    "is_last_encoded",
    "is_shim_command",
    "json_with_outputs",
    "new_nonce",
    "parse_display",
    "python_command",
    "shim_env",
    "shim_source",
]


#: The last output :func:`encode_display` wrote, and its text: a consumer in the same
#: process (the server's stream) reads it back without parsing a 1 MB image again.
_last_encoded: tuple[str, dict[str, Any]] | None = None


def encode_display(item: dict[str, Any]) -> str:
    """``item`` as a :data:`DISPLAY_STREAM` chunk: ``json.dumps(item)``'s text, made
    without escaping an image's base64 (:func:`.bundles.display_json`)."""
    global _last_encoded
    text = display_json(item)
    _last_encoded = (text, item)
    return text


def is_last_encoded(text: str) -> bool:
    """True when ``text`` is the very chunk :func:`encode_display` wrote last: JSON
    made here, on one line, that a stream may pass on as it is."""
    return _last_encoded is not None and text is _last_encoded[0]


def parse_display(text: str) -> dict[str, Any]:
    """The output a :data:`DISPLAY_STREAM` chunk carries (raises ``ValueError`` on any
    other text). The chunk :func:`encode_display` just wrote gives its very item (which
    no one changes: a kept output is read-only)."""
    if is_last_encoded(text):
        assert _last_encoded is not None
        return _last_encoded[1]
    item = json.loads(text)
    if not isinstance(item, dict) or item.get("output_type") != OUTPUT_TYPE:
        raise ValueError("not a display output")
    if not isinstance(item.get("data"), dict):
        raise ValueError("a display output without data")
    return item
