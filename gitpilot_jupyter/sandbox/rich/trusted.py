"""An output made safe for a view that trusts what it shows (a cell run in the session).

JupyterLab renders a trusted output's HTML, Markdown and SVG as they are: a run's
output is not the user's, so :func:`for_trusted_view` cleans them first.

* HTML: nh3 (ammonia's allowlist: no script, no event handler, no ``javascript:``).
* Markdown stays Markdown: each raw HTML tag in it is replaced by nh3's cleaned form of
  that tag (an allowed tag keeps its allowed attributes) or escaped (``&lt;``) so it
  shows as text; a link or image whose destination has a scheme other than http(s),
  mailto or ``data:image/`` points to ``#``. Everything else (headings,
  emphasis, lists, ``>`` quotes, tables, code, math) is left as written. A tag inside
  code is cleaned too: the Markdown is not parsed here, and a parse that differed from
  the renderer's (an HTML block around a code fence) would let a tag through.
* SVG becomes an ``<img>`` with a data URI (``text/html``): a script in it never runs.
"""

from __future__ import annotations

import base64
import html
import re
from typing import Any

import nh3

#: Tags whose content nh3 drops with them: escaped in Markdown, never rebuilt.
_DROPPED_TAGS = frozenset({"script", "style"})
_ATTRIBUTE = r"""\s+[^\s"'>/=]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?"""
#: A raw HTML tag (CommonMark's open and closing tags), a comment, a declaration or
#: processing instruction, and an autolink.
_TAG = re.compile(
    rf"<(?P<close>/?)(?P<name>[A-Za-z][A-Za-z0-9-]*)(?P<attrs>(?:{_ATTRIBUTE})*)\s*/?>"
    r"|<!--.*?-->|<[!?][^>]*>"
    r"|<(?P<auto>[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>"
    # Any other "<" a renderer could read as the start of a tag: escaped.
    r"|<(?=[A-Za-z/!?])",
    re.DOTALL,
)
#: An inline link's or image's destination, and a reference definition's.
_LINK = re.compile(r"\]\(\s*(?P<dest><[^>\n]*>|[^\s)]+)")
_REFERENCE = re.compile(
    r"^(?P<lead>[ \t>*+\-\d.)]*\[[^\]\n]+\]:[ \t]*\n?[ \t]*)(?P<dest><[^>\n]*>|\S+)", re.M
)
_SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")


def _allowed_url(url: str) -> bool:
    """True for a destination without a scheme, or with a safe one (entities, escapes
    and control characters undone first, as a renderer would). ``data:image/`` is safe
    for an image, and a link to one is not followed (browsers open no top-level data:
    URL)."""
    plain = html.unescape(url.strip("<>")).replace("\\", "")
    plain = "".join(ch for ch in plain if ch > " ")
    scheme = _SCHEME.match(plain)
    if scheme is None or any(c in plain[: scheme.end()] for c in "/?#"):
        return True
    name = scheme.group(1).lower()
    if name == "data":
        return plain[5:].lower().startswith("image/")
    return name in _SAFE_SCHEMES


def _clean_tag(match: re.Match[str]) -> str:
    text = match.group(0)
    auto = match.group("auto")
    if auto is not None:
        return (
            text
            if _allowed_url(auto) and not auto.lower().startswith("data:")
            else ("&lt;" + text[1:])
        )
    name = (match.group("name") or "").lower()
    if not name or name not in nh3.ALLOWED_TAGS or name in _DROPPED_TAGS:
        return "&lt;" + text[1:]  # a comment, a declaration, or a tag not allowed: text
    if match.group("close"):
        return f"</{name}>"
    cleaned = nh3.clean(text)
    end = cleaned.find(">")
    if not cleaned.startswith("<") or end < 0:
        return "&lt;" + text[1:]
    return cleaned[: end + 1]


def _clean_link(match: re.Match[str]) -> str:
    if _allowed_url(match.group("dest")):
        return match.group(0)
    return match.group(0)[: match.start("dest") - match.start()] + "#"


def _clean_reference(match: re.Match[str]) -> str:
    if _allowed_url(match.group("dest")):
        return match.group(0)
    return match.group("lead") + "#"


def clean_markdown(text: str) -> str:
    """``text`` with its raw HTML cleaned and unsafe link destinations replaced."""
    text = _TAG.sub(_clean_tag, text)
    text = _LINK.sub(_clean_link, text)
    return _REFERENCE.sub(_clean_reference, text)


def svg_as_img(svg: str) -> str:
    """``svg`` as an ``<img>`` with a data URI (an image context runs no script)."""
    encoded = base64.b64encode(svg.encode("utf-8")).decode("ascii")
    return f'<img src="data:image/svg+xml;base64,{encoded}" />'


def for_trusted_view(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` (a kept output) made safe to show as trusted: a new dict, ``item`` as it was."""
    data = dict(item.get("data", {}))
    if "text/html" in data:
        data["text/html"] = nh3.clean(data["text/html"])
    if "text/markdown" in data:
        data["text/markdown"] = clean_markdown(data["text/markdown"])
    svg = data.pop("image/svg+xml", None)
    if isinstance(svg, str) and "text/html" not in data:
        data["text/html"] = svg_as_img(svg)
    return {**item, "data": data}
