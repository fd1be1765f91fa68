"""What a message may quote of an HTTP body: a short, readable excerpt, never raw HTML.

A proxy, a login page or another web server in front of (or instead of) the
Runner answers with an HTML page; its markup in an error would hide what it says.
"""

from __future__ import annotations

import html
import re

#: How much of a body a message quotes.
BODY_EXCERPT_CHARS = 400

_HTML = re.compile(r"<\s*(?:!doctype|html|head|body|title|h1|p|div|center|pre)\b", re.IGNORECASE)
_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_HIDDEN = re.compile(r"<(script|style|head)\b.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")


def readable_excerpt(text: str, limit: int = BODY_EXCERPT_CHARS) -> str:
    """``text`` cut to ``limit`` characters; an HTML page as its title and its text."""
    if _HTML.search(text[:2000]) is None:
        return text[:limit]
    found = _TITLE.search(text)
    title = " ".join(html.unescape(_TAG.sub(" ", found.group(1))).split()) if found else ""
    body = " ".join(html.unescape(_TAG.sub(" ", _HIDDEN.sub(" ", text))).split())
    if title and body.startswith(title):
        body = body[len(title) :].strip()
    parts = [part for part in (title, body) if part]
    return ("an HTML page: " + (" - ".join(parts) or "(no text)"))[:limit]
