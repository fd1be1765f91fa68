"""The rich output core on its own: the frame splitter, the checks, the trusted view."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import nh3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gitpilot_jupyter.sandbox.rich import (
    DisplayCaps,
    DisplayOutputs,
    InlineImages,
    for_trusted_view,
    parse_display,
)
from gitpilot_jupyter.sandbox.rich.trusted import clean_markdown
from gitpilot_jupyter.sandbox.rich.wire import Frame, FrameSplitter, Text, frame, new_nonce

NONCE = new_nonce()


def split(stream: bytes, chunk: int, nonce: str = NONCE, cap: int = 1 << 20) -> list[object]:
    """``stream`` fed ``chunk`` bytes at a time: its parts, adjacent text joined."""
    splitter = FrameSplitter(nonce, cap)
    parts: list[object] = []
    pieces = [stream[i : i + chunk] for i in range(0, len(stream), chunk)]
    for part in [p for piece in pieces for p in splitter.feed(piece)] + list(splitter.finish()):
        if isinstance(part, Text) and parts and isinstance(parts[-1], Text):
            parts[-1] = Text(parts[-1].data + part.data)
        else:
            parts.append(part)
    return parts


def test_frames_come_out_of_the_text_however_the_reads_cut_them() -> None:
    payload = json.dumps({"data": {"text/plain": "é"}}).encode()
    stream = b"before\x1e\n" + frame(NONCE, payload) + b"\x1egitpilot-display nope 3\nabc" + b"end"
    want = [
        Text(b"before\x1e\n"),
        Frame(len(payload), payload),
        Text(b"\x1egitpilot-display nope 3\nabcend"),
    ]
    for chunk in (1, 2, 3, 7, 64, len(stream)):
        assert split(stream, chunk) == want, chunk
    assert split(stream, 5, nonce="") == [Text(stream)]  # no nonce: nothing is a frame


def test_a_frame_past_the_cap_is_not_kept_and_one_cut_short_is_said() -> None:
    big = frame(NONCE, b"x" * 100)
    assert split(big + b"after", 8, cap=99) == [Frame(100, None), Text(b"after")]
    assert split(frame(NONCE, b"x" * 100)[:-1], 8) == [Frame(-1, None)]
    assert split(b"\x1egitpilot-disp", 4) == [Text(b"\x1egitpilot-disp")]


def test_checks_keep_what_is_allowed_and_count_what_is_not() -> None:
    outputs = DisplayOutputs(DisplayCaps(item_mb=1, run_mb=1, outputs=3))

    def take(data: object, metadata: object = None) -> dict[str, object] | None:
        payload = json.dumps({"data": data, "metadata": metadata or {}}).encode()
        return outputs.take(Frame(len(payload), payload), 5)

    kept = take(
        {"image/png": "iVBO\nRw==\n", "application/javascript": "x", "text/plain": "p"},
        {"image/png": {"width": 3, "height": True, "onload": "x"}, "isolated": True},
    )
    assert kept == {
        "output_type": "display_data",
        "data": {"text/plain": "p", "image/png": "iVBORw=="},
        "metadata": {"image/png": {"width": 3}},
        "stdout_at": 5,
    }
    assert take({"image/png": "!!"}) is None
    assert take({"text/html": ["<b>", "x"]}) is None
    assert take({"text/plain": "\ud800"}) is None
    assert outputs.take(Frame(3, b"[1]"), 0) is None
    assert take({"application/json": {"deep": [None, 1.5]}}) is not None
    assert take({"text/plain": "third"}) is not None
    assert take({"text/plain": "fourth"}) is None
    assert outputs.take(Frame(2_000_000, None), 0) is None
    assert outputs.notes() == [
        "1 display output dropped: image/png is not valid base64",
        "1 display output dropped: text/html is not text",
        "1 display output dropped: text/plain is not valid UTF-8 text",
        '1 display output dropped: no "data" object',
        "1 display output dropped: a run keeps at most 3 (max_display_outputs)",
        "1 display output dropped: larger than 1 MB (max_display_item_mb)",
        "application/javascript left out of a display output: not an allowed type",
    ]
    assert parse_display(json.dumps(outputs.items[0])) == outputs.items[0]
    with pytest.raises(ValueError):
        parse_display('{"output_type": "stream"}')


def test_the_trusted_view_cleans_html_and_svg() -> None:
    item = {
        "output_type": "display_data",
        "data": {
            "text/html": '<b onclick="x()">b</b><script>alert(1)</script>',
            "image/svg+xml": "<svg><script>alert(1)</script></svg>",
            "text/plain": "p",
        },
        "metadata": {},
        "stdout_at": 0,
    }
    safe = for_trusted_view(item)
    assert safe["data"] == {"text/html": "<b>b</b>", "text/plain": "p"}
    assert item["data"]["text/html"].startswith("<b onclick")  # the item itself unchanged
    svg = for_trusted_view({**item, "data": {"image/svg+xml": "<svg/>"}})
    assert svg["data"]["text/html"] == '<img src="data:image/svg+xml;base64,PHN2Zy8+" />'


MARKDOWN_KEPT = [
    "# Title\n\n> a quote\n\n* **bold** _it_ `a < b`\n\n| a | b |\n|---|---|\n| 1 | 2 |",
    "$x^2$ and [a link](https://example.org/a?b=1) ![img](data:image/png;base64,AAAA)",
    '```python\nprint(1)\n```\n<b>bold</b> <br> <a href="https://x.org">x</a>',
    "[ref]: https://example.org\n<mailto:me@example.org> <https://example.org>",
]


@pytest.mark.parametrize("text", MARKDOWN_KEPT)
def test_markdown_syntax_is_left_as_written(text: str) -> None:
    cleaned = clean_markdown(text)
    # (nh3 gives a link its rel; nothing else changes)
    assert cleaned == text.replace(
        'href="https://x.org"', 'href="https://x.org" rel="noopener noreferrer"'
    )


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("<img src=x onerror=alert(1)>", '<img src="x">'),
        ("<script>alert(1)</script>", "&lt;script>alert(1)&lt;/script>"),
        ('<img src=x onerror="alert(1)"//>', '&lt;img src=x onerror="alert(1)"//>'),
        ("<iframe src=x></iframe>", "&lt;iframe src=x>&lt;/iframe>"),
        ("[x](javascript:alert(1))", "[x](#))"),
        ("[x]( jav&#x61;script:alert(1))", "[x]( #))"),
        ("[x](java\\script:alert(1))", "[x](#))"),
        ("![x](data:text/html,<b>)", "![x](#)"),
        ("[r]: javascript:alert(1)", "[r]: #"),
        ("> [r]:\n  vbscript:x", "> [r]:\n  #"),
        ("<javascript:alert(1)>", "&lt;javascript:alert(1)>"),
        ("<!-- hidden --><?php x ?>", "&lt;!-- hidden -->&lt;?php x ?>"),
        (
            "<div>\n```\n<img src=x onerror=alert(1)>\n```\n</div>",
            '<div>\n```\n<img src="x">\n```\n</div>',
        ),
    ],
)
def test_markdown_loses_every_active_part(text: str, want: str) -> None:
    cleaned = clean_markdown(text)
    assert cleaned == want
    # What a browser reads as HTML in it: allowed tags, no handler, no script URL.
    tags = Tags()
    tags.feed(cleaned)
    assert tags.seen <= nh3.ALLOWED_TAGS - {"script", "style"}, tags.seen
    assert not [a for a in tags.attributes if a[0].startswith("on") or "script:" in a[1]]


class Tags(HTMLParser):
    """The tags and attributes a browser would see in some text."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.attributes: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.add(tag)
        self.attributes += [(name, (value or "").lower()) for name, value in attrs]


def test_the_envelope_comes_back_from_json_with_its_outputs() -> None:
    from gitpilot_jupyter.sandbox.results import RunResult

    item = {"output_type": "display_data", "data": {"text/plain": "1"}, "metadata": {}}
    result = RunResult("subprocess", "python", ["python", "inline.py"], 0, outputs=[item])
    again = RunResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again == result and again.outputs == [item]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=40).map(lambda b: ("text", b.replace(b"\x1e", b"") + b"\x1e\n")),
            st.binary(max_size=300).map(lambda b: ("frame", b)),
        ),
        max_size=8,
    ),
    st.integers(min_value=1, max_value=97),
)
def test_the_splitter_keeps_every_byte_of_text_and_every_frame(
    parts: list[tuple[str, bytes]], chunk: int
) -> None:
    stream = b"".join(frame(NONCE, data) if kind == "frame" else data for kind, data in parts)
    got = split(stream, chunk, cap=200)
    text = b"".join(p.data for p in got if isinstance(p, Text))
    assert text == b"".join(data for kind, data in parts if kind == "text")
    frames = [p for p in got if isinstance(p, Frame)]
    want = [Frame(len(d), d if len(d) <= 200 else None) for k, d in parts if k == "frame"]
    assert frames == want


def test_inline_images_share_the_runs_display_caps() -> None:
    caps = DisplayCaps(item_mb=1, run_mb=1, outputs=3)
    shown = [{"output_type": "display_data", "data": {"text/plain": "x" * 1000}}]
    inline = InlineImages.after(caps, shown)
    assert inline.take(3 * 1024 * 1024 // 4 + 1) == "larger than 1 MB (max_display_item_mb)"
    assert inline.take(600 * 1024) is None  # 800 KiB once base64
    assert inline.take(600 * 1024) == "past 1 MB for the run (max_display_run_mb)"
    assert inline.take(10, base64_encoded=False) is None  # an SVG: its text
    assert inline.take(10) == "a run keeps at most 3 (max_display_outputs)"


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet='Ab+/=\n é"\\', max_size=14))
def test_base64_seen_as_plain_is_base64_the_decoder_takes(text: str) -> None:
    import base64
    import binascii

    from gitpilot_jupyter.sandbox.rich.bundles import is_plain_base64

    if is_plain_base64(text):
        base64.b64decode(text, validate=True)  # never raises for what it says True of
        assert json.dumps(text) == f'"{text}"'  # and it needs no escape in JSON
    valid = True
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        valid = False
    outputs = DisplayOutputs()
    payload = json.dumps({"data": {"image/png": text}}).encode()
    kept = outputs.take(Frame(len(payload), payload), 0)
    assert (kept is not None) == (valid or _valid_unwrapped(text))  # the check as it was


def _valid_unwrapped(text: str) -> bool:
    import base64
    import binascii

    try:
        base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["image/png", "image/gif", "text/plain", "text/html"]),
        st.text(alphabet='AB/+=\n"é', max_size=12) | _JSON_VALUES,
        max_size=4,
    ),
    _JSON_VALUES,
)
def test_outputs_encoded_with_their_base64_spliced_are_json_dumps_text(
    data: dict[str, object], other: object
) -> None:
    from gitpilot_jupyter.sandbox.rich import display_json, json_with_outputs

    item = {"output_type": "display_data", "data": data, "metadata": {}, "stdout_at": 3}
    assert display_json(item) == json.dumps(item)
    answer = {"plan": {"other": other}, "result": {"outputs": [item, other], "x": other}}
    assert json_with_outputs(answer) == json.dumps(answer)
    assert json_with_outputs({"outputs": other}) == json.dumps({"outputs": other})
