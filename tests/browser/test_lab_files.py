"""Files and sessions in a real lab: ▶ Run lists what a snippet wrote under ``out/`` with
download links (and an image shown), Files… hands workspace files to a run (a second pick
adds to the first; Re-run hands the same files again, each removable), and the Sandbox
Sessions panel lists a session started over REST, whose Stop ends it."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Locator, Page, expect

from .flood import APPROVE, markdown_notebook, write_file
from .lab import Lab
from .ui import open_file, plan_dialog, run_palette_command, screenshot

pytestmark = pytest.mark.browser

OUT_NOTEBOOK = "outfiles.ipynb"
#: A 40x24 red PNG, written to out/ next to a CSV.
RED_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAACgAAAAYCAIAAAAH5iiXAAAAKElEQVR42mO4oKAwIIhh1OJR"
    "i0ctHrV41OJRi0ctHrV41OJRi4ePxQBCi/wuhalZUwAAAABJRU5ErkJggg=="
)
OUT_CODE = f"""\
import base64, os
os.makedirs("out/plots", exist_ok=True)
with open("out/table.csv", "w") as f:
    f.write("region,total\\nnorth,12\\n")
with open("out/plots/red.png", "wb") as f:
    f.write(base64.b64decode("{RED_PNG}"))
print("written")
"""
INPUT_NOTEBOOK = "inputs.ipynb"
INPUT_CSV = "sales.csv"
INPUT_CODE = f'print(open("{INPUT_CSV}").read().strip())\n'
INPUT_SCRIPT = "read_sales.py"
COSTS_CSV = "costs.csv"
PICKS_NOTEBOOK = "picks.ipynb"
PICKS_CODE = f'print(open("{INPUT_CSV}").read() + open("{COSTS_CSV}").read(), end="")\n'
RERUN_NOTEBOOK = "rerun.ipynb"
#: Its own code (a block's kept result is found by its code, and its cell by its text).
RERUN_CODE = f"# re-run keeps its inputs\n{INPUT_CODE}"
HISTORY_KEY = "gitpilot-jupyter:code-block-runs"
SESSION = "browser-session"


def test_run_lists_its_out_files_downloads_them_and_shows_the_image(lab: Lab, page: Page) -> None:
    write_file(lab, OUT_NOTEBOOK, markdown_notebook("out", f"```python\n{OUT_CODE}```\n"))
    open_file(page, lab, OUT_NOTEBOOK)
    cell = page.locator(".jp-MarkdownCell", has_text="out/table.csv")
    cell.get_by_role("button", name="Run python code block in the sandbox").click()
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    output = cell.locator(".jp-gitpilot-output")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")

    files = output.get_by_role("region", name="Files out")
    csv = files.get_by_role("link", name="Download table.csv (22 B)")
    expect(csv).to_be_visible()
    expect(files.get_by_role("link", name="Download plots/red.png (97 B)")).to_be_visible()
    # The image among them is shown, rendered as untrusted output.
    image = files.locator(".jp-gitpilot-run-image img")
    expect(image).to_be_visible()
    assert image.evaluate("i => i.complete && i.naturalWidth") == 40
    screenshot(output, "run-files-out-light")

    with page.expect_download() as download:
        csv.click()
    assert download.value.suggested_filename == "table.csv"
    assert download.value.path().read_text(encoding="utf-8") == "region,total\nnorth,12\n"

    # Reopened later, when the server no longer keeps the run's files (expired after an
    # hour, or another server): the link says so instead of downloading an error.
    page.evaluate(
        """key => { const runs = JSON.parse(localStorage.getItem(key));
        for (const entry of Object.values(runs)) entry.result.run_id = 'run_00000000000000aa';
        localStorage.setItem(key, JSON.stringify(runs)); }""",
        HISTORY_KEY,
    )
    page.reload()
    files = cell.locator(".jp-gitpilot-output").get_by_role("region", name="Files out")
    expect(files.locator('li[data-name="plots/red.png"]')).to_contain_text("no longer kept")
    files.get_by_role("link", name="Download table.csv (22 B)").click()
    expect(files.locator('li[data-name="table.csv"]')).to_contain_text("no longer kept")


def pick_in_file_dialog(page: Page, name: str) -> None:
    """Files… → the lab's file dialog → select ``name`` → Select."""
    plan_dialog(page).get_by_role(
        "button", name="Choose workspace files to hand to the run"
    ).click()
    picker = page.locator(".jp-Dialog", has=page.locator(".jp-Open-Dialog"))
    expect(picker).to_contain_text("Files for the run")
    picker.locator(".jp-DirListing-item", has_text=name).click()
    picker.get_by_role("button", name="Select").click()


def test_files_hands_a_workspace_file_to_a_code_block_run(lab: Lab, page: Page) -> None:
    write_file(lab, INPUT_CSV, "region,total\nsouth,7\n")
    write_file(lab, INPUT_NOTEBOOK, markdown_notebook("in", f"```python\n{INPUT_CODE}```\n"))
    open_file(page, lab, INPUT_NOTEBOOK)
    # The lab reopens the earlier tests' notebooks too: stay in this one's cell.
    cell = page.locator(".jp-MarkdownCell", has_text=INPUT_CSV)
    cell.get_by_role("button", name="Run python code block in the sandbox").click()
    dialog = plan_dialog(page)
    expect(dialog).not_to_contain_text("Files in")
    pick_in_file_dialog(page, INPUT_CSV)

    # A new plan, with the file bound into it, listed before the approval.
    dialog = plan_dialog(page)
    inputs = dialog.get_by_role("list", name="Files in")
    expect(inputs).to_contain_text(INPUT_CSV)
    expect(inputs).to_contain_text("21 B")
    screenshot(page, "plan-files-in-light")
    dialog.get_by_role("button", name=APPROVE).click()
    output = cell.locator(".jp-gitpilot-output")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("region,total\nsouth,7\n")


def file_names(dialog: Locator) -> list[str]:
    """The names the approval dialog lists under "Files in", in order."""
    return (
        dialog.get_by_role("list", name="Files in")
        .locator("li")
        .evaluate_all("items => items.map(item => item.dataset.name)")
    )


def test_a_second_pick_adds_to_the_first(lab: Lab, page: Page) -> None:
    write_file(lab, INPUT_CSV, "region,total\nwest,5\n")
    write_file(lab, COSTS_CSV, "region,cost\nwest,2\n")
    write_file(lab, PICKS_NOTEBOOK, markdown_notebook("picks", f"```python\n{PICKS_CODE}```\n"))
    open_file(page, lab, PICKS_NOTEBOOK)
    cell = page.locator(".jp-MarkdownCell", has_text=COSTS_CSV)
    cell.get_by_role("button", name="Run python code block in the sandbox").click()
    pick_in_file_dialog(page, INPUT_CSV)
    expect(plan_dialog(page).get_by_role("list", name="Files in")).to_contain_text(INPUT_CSV)
    # The same file again, then another: each is listed once, the first pick kept.
    pick_in_file_dialog(page, INPUT_CSV)
    expect(plan_dialog(page).get_by_role("list", name="Files in")).to_contain_text(INPUT_CSV)
    pick_in_file_dialog(page, COSTS_CSV)
    dialog = plan_dialog(page)
    expect(dialog.get_by_role("list", name="Files in")).to_contain_text(COSTS_CSV)
    assert file_names(dialog) == [INPUT_CSV, COSTS_CSV]
    dialog.get_by_role("button", name=APPROVE).click()
    output = cell.locator(".jp-gitpilot-output")
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text(
        "region,total\nwest,5\nregion,cost\nwest,2\n"
    )


def test_rerun_plans_again_with_the_runs_inputs(lab: Lab, page: Page) -> None:
    write_file(lab, INPUT_CSV, "region,total\nnorth,9\n")
    write_file(lab, RERUN_NOTEBOOK, markdown_notebook("rerun", f"```python\n{RERUN_CODE}```\n"))
    open_file(page, lab, RERUN_NOTEBOOK)
    cell = page.locator(".jp-MarkdownCell", has_text="re-run keeps its inputs")
    cell.get_by_role("button", name="Run python code block in the sandbox").click()
    pick_in_file_dialog(page, INPUT_CSV)
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    output = cell.locator(".jp-gitpilot-output")
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("region,total\nnorth,9\n")

    # The file changed since: Re-run hands it again (a new plan binds its new content).
    write_file(lab, INPUT_CSV, "region,total\nnorth,10\n")
    output.get_by_role("button", name="Run this again (you approve the plan first)").click()
    dialog = plan_dialog(page)
    expect(dialog.get_by_role("list", name="Files in")).to_contain_text(INPUT_CSV)
    assert file_names(dialog) == [INPUT_CSV]
    dialog.get_by_role("button", name=APPROVE).click()
    expect(output.locator(".jp-gitpilot-output-text")).to_have_text("region,total\nnorth,10\n")

    # In the Re-run's dialog an input can be taken out: the new plan has none.
    output.get_by_role("button", name="Run this again (you approve the plan first)").click()
    dialog = plan_dialog(page)
    dialog.get_by_role("button", name=f"Remove {INPUT_CSV} from the run's files").click()
    expect(plan_dialog(page)).not_to_contain_text("Files in")
    plan_dialog(page).get_by_role("button", name=APPROVE).click()
    expect(output.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 1")
    expect(output.locator(".jp-gitpilot-output-text")).to_contain_text("FileNotFoundError")


def test_run_in_sandbox_of_a_file_takes_inputs(lab: Lab, page: Page) -> None:
    write_file(lab, INPUT_CSV, "region,total\neast,3\n")
    write_file(lab, INPUT_SCRIPT, INPUT_CODE)
    page.locator(".jp-DirListing-item", has_text=INPUT_SCRIPT).click(button="right")
    page.get_by_role("menuitem", name="Run in Sandbox").click()
    pick_in_file_dialog(page, INPUT_CSV)
    dialog = plan_dialog(page)
    expect(dialog.get_by_role("list", name="Files in")).to_contain_text(INPUT_CSV)
    dialog.get_by_role("button", name=APPROVE).click()
    tab = page.locator(".jp-gitpilot-run-tab:visible")
    expect(tab.locator(".jp-gitpilot-result-summary")).to_contain_text("exit 0")
    expect(tab.locator(".jp-gitpilot-output-text")).to_have_text("region,total\neast,3\n")


def test_sessions_panel_lists_a_session_and_stops_it(lab: Lab, page: Page) -> None:
    started = lab.api("POST", "api/sandbox/sessions", json={"name": SESSION})
    if started.status_code == 503:
        pytest.skip(f"this host cannot hold a session: {started.json().get('message')}")
    assert started.status_code == 201, started.text
    try:
        run_palette_command(page, "Sandbox: Sessions")
        panel = page.locator("#gitpilot-sandbox-sessions")
        sessions = panel.get_by_role("list", name="Sandbox sessions")
        row = sessions.locator(f'[data-name="{SESSION}"]')
        expect(row).to_contain_text("idle")
        expect(row).to_contain_text("0 cells")
        screenshot(panel, "sessions-panel-light")
        stop = row.get_by_role(
            "button", name=f"Stop session {SESSION} (its processes and files go)"
        )
        stop.focus()
        page.keyboard.press("Enter")
        expect(row).to_have_count(0)
        expect(panel).to_contain_text("No sandbox sessions")
        listed = lab.api("GET", "api/sandbox/sessions").json()["sessions"]
        assert [s["name"] for s in listed] == [], json.dumps(listed)
    finally:
        lab.api("DELETE", f"api/sandbox/sessions/{SESSION}")
