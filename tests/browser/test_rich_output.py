"""▶ Run shows a snippet's figure and HTML in a real lab, as untrusted output: the figure
is checked by its pixels on screen, and the HTML's script never runs."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.support.figures import RED_FIGURE, assert_red_figure, require_matplotlib

from .flood import APPROVE, markdown_notebook, write_file
from .lab import Lab
from .ui import open_file, plan_dialog, run_button, screenshot

pytestmark = pytest.mark.browser

RICH_NOTEBOOK = "rich.ipynb"
#: Text, the red figure, text, then HTML with a script and an event handler.
RICH_CODE = f"""\
print("before")
{RED_FIGURE}print("after")
from IPython.display import HTML, display
display(HTML(
    "<p class='rich-html'>html shown</p><script>window.richRan = 1</script>"
    "<img src='x' onerror='window.richRan = 2'>"
))
"""


def test_run_shows_the_figure_and_never_runs_the_htmls_script(lab: Lab, page: Page) -> None:
    require_matplotlib()
    write_file(lab, RICH_NOTEBOOK, markdown_notebook("rich", f"```python\n{RICH_CODE}```\n"))
    open_file(page, lab, RICH_NOTEBOOK)
    run_button(page, "python").click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    output = page.locator(".jp-gitpilot-output")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")

    box = output.locator(".jp-gitpilot-output-text")
    order = box.evaluate(
        """box => Array.from(box.children).map(child =>
          child.classList.contains('jp-gitpilot-display')
            ? `[${child.dataset.mimeType}]` : child.textContent)"""
    )
    assert order == ["before\n", "[image/png]", "after\n", "[text/html]"], order

    figure = box.locator(".jp-gitpilot-display img").first
    expect(figure).to_be_visible()
    figure.scroll_into_view_if_needed()
    complete, *natural = figure.evaluate("i => [i.complete, i.naturalWidth, i.naturalHeight]")
    # What the user sees, by its pixels on screen: the whole figure, red inside, unscaled
    # (a pixel more where the box starts between two pixels).
    shown = assert_red_figure(figure.screenshot())
    assert complete and all(0 <= s - n <= 1 for s, n in zip(shown, natural, strict=True)), (
        shown,
        natural,
    )

    html = box.locator(".jp-gitpilot-display .rich-html")
    expect(html).to_have_text("html shown")
    assert box.locator("script").count() == 0
    assert "onerror" not in box.inner_html()
    page.wait_for_timeout(500)  # an image that fails to load would have fired by now
    assert page.evaluate("window.richRan === undefined")
    screenshot(output, "run-rich-output-light")
