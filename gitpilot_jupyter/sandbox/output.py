"""Capped output collection: the one place the per-stream byte cap is enforced.

A stream keeps at most ``cap`` bytes; everything beyond is read and discarded
so the child never blocks on a full pipe and memory stays bounded. Text is
decoded as UTF-8 with replacement and never cut inside a character.
"""

from __future__ import annotations

import codecs

DEFAULT_OUTPUT_CAP = 512_000


def utf8_boundary(data: bytes, limit: int) -> int:
    """The largest index <= ``limit`` that does not split a UTF-8 character."""
    if limit >= len(data):
        return len(data)
    cut = limit
    # Step back over continuation bytes (10xxxxxx) to the start of a character: at most
    # three, as a UTF-8 character has at most four bytes. Past that the bytes are no
    # character (binary output): cut at the limit, keeping all the cap allows.
    while cut > max(limit - 3, 0) and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return limit if (data[cut] & 0xC0) == 0x80 else cut


class CappedText:
    """Collects one stream's bytes up to a cap and yields decoded text chunks."""

    def __init__(self, cap: int = DEFAULT_OUTPUT_CAP) -> None:
        self.cap = cap
        self.kept = 0
        #: Characters of text kept so far (where a display output sits in it).
        self.chars = 0
        self.truncated = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._parts: list[str] = []

    def feed(self, data: bytes) -> str:
        """Add raw bytes; return the newly kept text ('' once the cap is reached)."""
        if not data:
            return ""
        if self.truncated:
            return ""
        room = self.cap - self.kept
        if len(data) > room:
            data = data[: utf8_boundary(data, room)]
            self.truncated = True
        self.kept += len(data)
        text = self._decoder.decode(data, final=self.truncated)
        if text:
            self._parts.append(text)
            self.chars += len(text)
        return text

    def finish(self) -> str:
        """Flush the decoder (a character left incomplete becomes U+FFFD)."""
        text = self._decoder.decode(b"", final=True)
        if text:
            self._parts.append(text)
            self.chars += len(text)
        return text

    @property
    def text(self) -> str:
        """Everything kept so far."""
        return "".join(self._parts)


def cap_text(text: str, cap: int = DEFAULT_OUTPUT_CAP) -> tuple[str, bool]:
    """Apply the byte cap to text already received whole (e.g. from the Runner)."""
    collector = CappedText(cap)
    collector.feed(text.encode("utf-8", errors="replace"))
    collector.finish()
    return collector.text, collector.truncated
