"""The server's check of each display frame: the MIME allowlist, base64, the caps.

Untrusted data stays data: a frame is parsed as JSON and checked, never interpreted
(HTML is not parsed here; :func:`.trusted.for_trusted_view` cleans it for a view that
would). A frame that breaks a rule is dropped, and the run's notes say so once per
reason, with how many (10,000 display calls give one sentence, not 10,000).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from .wire import Frame

#: A kept output's ``output_type`` (Jupyter's, for outputs of ``display()``).
OUTPUT_TYPE = "display_data"
#: The MIME types kept: never ``application/javascript`` nor a widget view.
TEXT_TYPES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/svg+xml")
BINARY_TYPES = ("image/png", "image/jpeg", "image/gif")
JSON_TYPE = "application/json"
ALLOWED_TYPES = (*TEXT_TYPES, *BINARY_TYPES, JSON_TYPE)
#: What an output's metadata keeps: an image's size, per MIME type.
_METADATA_KEYS = ("width", "height")

MIB = 1024 * 1024
#: The caps' defaults (the settings ``max_display_item_mb``, ``max_display_run_mb``,
#: ``max_display_outputs`` start here).
DEFAULT_ITEM_MB = 8
DEFAULT_RUN_MB = 32
DEFAULT_OUTPUTS = 500


@dataclass(frozen=True)
class DisplayCaps:
    """A run's caps on display outputs: bytes of one (its frame's payload, as sent: an
    image's base64), bytes of all, and how many."""

    item_mb: int = DEFAULT_ITEM_MB
    run_mb: int = DEFAULT_RUN_MB
    outputs: int = DEFAULT_OUTPUTS

    def over(self, count: int, used: int, size: int | None) -> str | None:
        """Why one more output of ``size`` bytes (None: past the item cap, unread) may not
        be kept after ``count`` outputs of ``used`` bytes; None when it may."""
        if size is None or size > self.item_mb * MIB:
            return f"larger than {self.item_mb} MB (max_display_item_mb)"
        if count >= self.outputs:
            return f"a run keeps at most {self.outputs} (max_display_outputs)"
        if used + size > self.run_mb * MIB:
            return f"past {self.run_mb} MB for the run (max_display_run_mb)"
        return None

    def describe(self) -> str:
        """The plan's line on them."""
        return (
            f"display outputs capped at {self.item_mb} MB each, {self.run_mb} MB and "
            f"{self.outputs} outputs per run"
        )


class Dropped(Exception):
    """A frame that breaks a rule: the reason, said in the run's notes."""


#: Base64's alphabet (RFC 4648, not the URL-safe one).
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def is_plain_base64(text: str) -> bool:
    """True when ``text`` is base64 that ``b64decode(text, validate=True)`` takes, seen
    without decoding it: the alphabet, at most two ``=`` at its end, whole quads. False
    says only "not seen so": ask the decoder (it takes a few odd forms this does not).

    A string it says True of needs no escape in JSON (a stream and an envelope splice
    it in as it is: :func:`display_json`). Its cost: one copy and one pass of
    ``bytes.translate`` (under 1 ms a MiB, against 3 ms to decode it).
    """
    if any(text is seen for seen in _SEEN_PLAIN):
        return True
    if not text.isascii() or len(text) % 4:  # (isascii: a flag of the string, no scan)
        return False
    raw = text.encode("ascii")
    rest = raw.translate(None, _BASE64_ALPHABET)
    plain = rest in (b"", b"=", b"==") and raw.endswith(rest)
    if plain and len(text) >= _SEEN_MIN_CHARS:
        _SEEN_PLAIN.append(text)
    return plain


#: The last large strings :func:`is_plain_base64` said True of, held (so that ``is``
#: cannot match another): a kept image is looked at again for its stream chunk and its
#: envelope, by identity then.
_SEEN_PLAIN: deque[str] = deque(maxlen=8)
_SEEN_MIN_CHARS = 65536


def _base64(mime: str, value: object) -> str:
    if not isinstance(value, str):
        raise Dropped(f"{mime} is not base64 text")
    if is_plain_base64(value):
        return value
    # It may be wrapped (IPython ends it with \n), or in a form only the decoder knows.
    for text in (value, "".join(value.split())):
        if text is not value and is_plain_base64(text):
            return text
        try:
            base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            continue
        return text
    raise Dropped(f"{mime} is not valid base64")


def display_json(item: dict[str, Any]) -> str:
    """``json.dumps(item)``, the very text, for a kept output (or any dict): its images'
    base64 spliced in as it is (a 1 MiB image: one copy, not 3 ms of escaping)."""
    out: list[str] = []
    _display_parts(item, out)
    return "".join(out)


def json_with_outputs(value: dict[str, Any]) -> str:
    """``json.dumps(value)``'s text for an answer holding kept outputs (an envelope, a
    planned run's): each of its ``outputs`` lists, in it or in a dict in it, made as
    :func:`display_json` makes an output; everything else by ``json.dumps``."""
    out: list[str] = []
    _parts_with_outputs(value, out)
    return "".join(out)


def _display_parts(item: dict[str, Any], out: list[str]) -> None:
    """Append ``json.dumps(item)``'s text to ``out`` in parts (joined once: each copy of
    a 1 MiB string is a fraction of a millisecond). Only a value :func:`is_plain_base64`
    says True of is spliced: it needs no escape."""
    data = item.get("data")
    if (
        not isinstance(data, dict)
        or not any(mime in data for mime in BINARY_TYPES)
        or not all(isinstance(key, str) for key in (*item, *data))  # (else: dumps's rules)
    ):
        out.append(json.dumps(item))
        return
    for number, (key, value) in enumerate(item.items()):
        out += (", " if number else "{", json.dumps(key), ": ")
        if key != "data":
            out.append(json.dumps(value))
            continue
        for count, (mime, part) in enumerate(data.items()):
            out += (", " if count else "{", json.dumps(mime), ": ")
            if mime in BINARY_TYPES and isinstance(part, str) and is_plain_base64(part):
                out += ('"', part, '"')
            else:
                out.append(json.dumps(part))
        out.append("}" if data else "{}")
    out.append("}")


def _parts_with_outputs(value: dict[str, Any], out: list[str]) -> None:
    if not all(isinstance(key, str) for key in value) or not any(
        isinstance(part, (dict, list)) for part in value.values()
    ):
        out.append(json.dumps(value))
        return
    for number, (key, part) in enumerate(value.items()):
        out += (", " if number else "{", json.dumps(key), ": ")
        if isinstance(part, dict):
            _parts_with_outputs(part, out)
        elif key == "outputs" and isinstance(part, list) and part:
            for count, output in enumerate(part):
                out.append(", " if count else "[")
                if isinstance(output, dict):
                    _display_parts(output, out)
                else:
                    out.append(json.dumps(output))
            out.append("]")
        else:
            out.append(json.dumps(part))
    out.append("}")


def _utf8(mime: str, value: object) -> None:
    """Refuse a string that is no UTF-8 text (a lone surrogate from a ``\\ud800`` escape)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise Dropped(f"{mime} is not valid UTF-8 text") from None
    elif isinstance(value, list):
        for part in value:
            _utf8(mime, part)
    elif isinstance(value, dict):
        for key, part in value.items():
            _utf8(mime, key)
            _utf8(mime, part)


def check_payload(payload: bytes) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """A frame's ``(data, metadata, left out)``: what is kept of it, and the MIME types
    left out (not allowed). Raises :class:`Dropped` when nothing can be kept."""
    try:
        bundle = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        raise Dropped("not a JSON object") from None
    raw = bundle.get("data") if isinstance(bundle, dict) else None
    if not isinstance(raw, dict):
        raise Dropped('no "data" object')
    left_out = sorted(mime for mime in raw if mime not in ALLOWED_TYPES)
    data: dict[str, Any] = {}
    for mime in ALLOWED_TYPES:
        if mime not in raw:
            continue
        value = raw[mime]
        if mime in BINARY_TYPES:
            data[mime] = _base64(mime, value)
        elif mime == JSON_TYPE:
            _utf8(mime, value)
            data[mime] = value
        else:
            if not isinstance(value, str):
                raise Dropped(f"{mime} is not text")
            _utf8(mime, value)
            data[mime] = value
    if not data:
        shown = ", ".join(left_out) or "none"
        raise Dropped(f"no allowed MIME type (it had: {shown})")
    given = bundle.get("metadata")
    metadata: dict[str, Any] = {}
    if isinstance(given, dict):
        for mime in data:
            sizes = given.get(mime)
            if isinstance(sizes, dict):
                kept = {
                    k: v
                    for k, v in sizes.items()
                    if k in _METADATA_KEYS and isinstance(v, int) and not isinstance(v, bool)
                }
                if kept:
                    metadata[mime] = kept
    return data, metadata, left_out


@dataclass
class DisplayOutputs:
    """A run's kept display outputs, in order, and what was dropped (for its notes)."""

    caps: DisplayCaps = field(default_factory=DisplayCaps)
    items: list[dict[str, Any]] = field(default_factory=list)
    kept_bytes: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    left_out: Counter[str] = field(default_factory=Counter)

    @property
    def max_payload(self) -> int:
        """The longest payload held in memory (longer ones are dropped unread)."""
        return self.caps.item_mb * MIB

    def take(self, frame: Frame, stdout_at: int) -> dict[str, Any] | None:
        """The output ``frame`` gives (``stdout_at``: characters of stdout before it), or
        None when it is dropped (counted for :meth:`notes`)."""
        try:
            item = self._check(frame, stdout_at)
        except Dropped as reason:
            self.dropped[str(reason)] += 1
            return None
        self.items.append(item)
        return item

    def _check(self, frame: Frame, stdout_at: int) -> dict[str, Any]:
        caps = self.caps
        if frame.size < 0:
            raise Dropped("cut short (the run ended inside it)")
        over = caps.over(
            len(self.items), self.kept_bytes, None if frame.payload is None else frame.size
        )
        if over is not None:
            raise Dropped(over)
        assert frame.payload is not None
        data, metadata, left_out = check_payload(frame.payload)
        for mime in left_out:
            self.left_out[mime] += 1
        self.kept_bytes += frame.size
        return {
            "output_type": OUTPUT_TYPE,
            "data": data,
            "metadata": metadata,
            "stdout_at": stdout_at,
        }

    def notes(self) -> list[str]:
        """One sentence per reason a frame was dropped or a MIME type left out."""
        notes = []
        for reason, count in self.dropped.items():
            what = "display output" if count == 1 else "display outputs"
            notes.append(f"{count} {what} dropped: {reason}")
        for mime, count in self.left_out.items():
            what = "a display output" if count == 1 else f"{count} display outputs"
            notes.append(f"{mime} left out of {what}: not an allowed type")
        return notes


@dataclass
class InlineImages:
    """What is left of a run's display caps for the images among its ``out/`` files that
    a view shows inline (``%%sandbox``), after the run's own display outputs: each image
    counts as one output of its base64 (an SVG: its text), as a displayed one does."""

    caps: DisplayCaps
    count: int = 0
    used: int = 0

    @classmethod
    def after(cls, caps: DisplayCaps, outputs: list[dict[str, Any]]) -> InlineImages:
        """The caps left once ``outputs`` (the run's kept display outputs) are shown."""
        used = sum(
            len(value)
            for item in outputs
            for value in (item.get("data") or {}).values()
            if isinstance(value, str)
        )
        return cls(caps, len(outputs), used)

    def take(self, size: int, *, base64_encoded: bool = True) -> str | None:
        """Charge one image of ``size`` bytes; why it may not be shown (None: it may)."""
        shown = 4 * -(-size // 3) if base64_encoded else size
        over = self.caps.over(self.count, self.used, shown)
        if over is None:
            self.count += 1
            self.used += shown
        return over
