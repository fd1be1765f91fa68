"""A snippet's figure reaches an agent: MCP image content, named in the text it reads."""

from __future__ import annotations

import base64

import pytest
from mcp.client.session import ClientSession
from mcp.types import ImageContent

from gitpilot_jupyter.agents import AgentSandbox
from gitpilot_jupyter.agents.render import MODEL_IMAGES
from tests.agents.test_mcp import envelope, run_session, text_of
from tests.support.figures import RED_FIGURE, assert_red_figure, require_matplotlib

#: Text, the red figure, and a table's HTML (with its text form).
PLOT = (
    f'print("drawn")\n{RED_FIGURE}from IPython.display import HTML\ndisplay(HTML("<b>table</b>"))\n'
)


@pytest.fixture(autouse=True)
def _matplotlib() -> None:
    require_matplotlib()


def test_the_mcp_tool_returns_the_figure_as_image_content() -> None:
    async def scenario(session: ClientSession) -> None:
        ran = await session.call_tool("run_in_sandbox", {"language": "python", "code": PLOT})
        assert not ran.is_error, text_of(ran)
        images = [block for block in ran.content if isinstance(block, ImageContent)]
        assert len(images) == 1 and images[0].mime_type == "image/png"
        assert_red_figure(base64.b64decode(images[0].data))
        text = text_of(ran)
        assert "--- display outputs ---" in text
        assert "[1] image/png, " in text and "bytes: returned as image content" in text
        assert "[2] <IPython.core.display.HTML object>" in text
        # The structured reply names the image's size instead of repeating its data.
        outputs = envelope(ran)["result"]["outputs"]
        assert outputs[0]["data"]["image/png"].endswith(" bytes]")
        assert outputs[1]["data"]["text/html"] == "<b>table</b>"

    run_session(["--approval", "auto", "--server", "local"], {}, scenario)


def test_the_python_tool_names_the_images_past_the_limit() -> None:
    many = f"""\
import matplotlib.pyplot as plt
for n in range({MODEL_IMAGES + 2}):
    plt.figure(figsize=(1, 1), dpi=20)
    plt.show()
"""
    reply = AgentSandbox(approval="auto", server="local").run_in_sandbox("python", many)
    assert reply.ok, reply.text
    assert len(reply.images) == MODEL_IMAGES
    assert all(mime == "image/png" for mime, _ in reply.images)
    assert reply.text.count("returned as image content") == MODEL_IMAGES
    assert f"not returned (only the first {MODEL_IMAGES} images are)" in reply.text
