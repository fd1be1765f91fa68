"""Rich output from real runs: figures, IPython.display objects, DataFrames, PIL images and
a snippet's last expression come back as MIME bundles in order with the text, on both
file-system engines, cold, warm and through a slot whose interpreter was started ahead.

The hostile outputs (a 100 MB image, invalid base64, JavaScript, 10,000 display calls)
each end in a note, the run's stdout intact.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.backend import ResourceLimits, RunRequest
from gitpilot_jupyter.sandbox.languages import Interpreters
from gitpilot_jupyter.sandbox.local.backends import NullSandbox, SubprocessSandbox
from gitpilot_jupyter.sandbox.local.layered import LayeredIsolator
from gitpilot_jupyter.sandbox.local.pool import PoolConfig
from gitpilot_jupyter.sandbox.results import RunResult
from gitpilot_jupyter.sandbox.rich import python_command, shim_source
from gitpilot_jupyter.sandbox.rich.wire import SHIM_LOADER

from .conftest import make_backend, require_landlock
from .pooling import until

#: Room for matplotlib and pandas (the isolation suite's SMALL limits are too tight).
ROOMY = ResourceLimits(memory_mb=768, max_processes=64, max_file_size_mb=16)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
ENGINES = ["bwrap", "landlock"]
MODES = ["cold", "warm", "prestart"]


def _backend(engine: str, mode: str) -> SubprocessSandbox:
    if mode == "cold":
        return make_backend(engine)
    isolator = LayeredIsolator(engine)
    if engine == "landlock":
        require_landlock(isolator)
    else:
        make_backend(engine)  # (skips or fails where bwrap cannot work)
    config = PoolConfig(mode="always", max_slots=1, prestart=mode == "prestart")
    backend = SubprocessSandbox(isolator=isolator, pool=config)
    assert backend.pool_error() is None, backend.pool_error()
    return backend


def request(code: str, **extra: Any) -> RunRequest:
    extra.setdefault("env", {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    extra.setdefault("limits", ROOMY)
    return RunRequest(language=extra.pop("language", "python"), code=code, timeout_sec=60, **extra)


def run(engine: str, code: str, mode: str = "cold", **extra: Any) -> RunResult:
    """``code`` run once on ``engine``: cold, or in a slot waiting for it (``mode``)."""
    backend = _backend(engine, mode)

    async def main() -> RunResult:
        try:
            if mode != "cold":
                pool = backend.pool()
                assert pool is not None
                await backend.run(request("pass", **extra))
                await until(lambda: pool.idle() >= 1)
            result = await backend.run(request(code, **extra))
            assert result.warm == (mode != "cold")
            return result
        finally:
            await backend.aclose()

    return asyncio.run(main())


def png(value: str) -> bytes:
    data = base64.b64decode(value, validate=True)
    assert data.startswith(PNG_SIGNATURE)
    return data


FIGURES = """
import matplotlib.pyplot as plt
print("before")
plt.plot([1, 2, 3])
plt.show()
print("between")
fig, ax = plt.subplots()
ax.bar(["a", "b"], [3, 1])
print("after")
"""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("engine", ENGINES)
def test_matplotlib_figures_from_show_and_left_open(engine: str, mode: str) -> None:
    result = run(engine, FIGURES, mode)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "before\nbetween\nafter\n"
    assert result.stderr == ""  # no warning about matplotlib's config folder
    shown, left_open = result.outputs
    for output in (shown, left_open):
        assert output["output_type"] == "display_data"
        assert output["data"]["text/plain"] == "<Figure size 640x480 with 1 Axes>"
        png(output["data"]["image/png"])
    assert shown["stdout_at"] == len("before\n")
    assert left_open["stdout_at"] == len(result.stdout)  # at exit, after all the text
    assert result.notes == []


def test_a_figure_as_the_last_expression_is_shown_once() -> None:
    code = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2])\nfig"
    result = run("bwrap", code)
    assert result.exit_code == 0, result.stderr
    (figure,) = result.outputs  # not again at the end, though still open
    png(figure["data"]["image/png"])


DISPLAYS = """
from IPython.display import HTML, JSON, SVG, Image, Latex, Markdown, display
import base64
PIXEL = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
display(Image(data=PIXEL, format="png"))
display(HTML("<b>bold</b>"))
display(Markdown("# Title\\n> quoted"))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"></svg>'))
display(JSON({"a": [1, 2]}))
display(Latex(r"$x^2$"))
print("done")
"""


def test_ipython_display_objects_come_back_as_bundles() -> None:
    result = run("bwrap", DISPLAYS)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "done\n" and result.stderr == ""
    kinds = [sorted(set(o["data"]) - {"text/plain"}) for o in result.outputs]
    assert kinds == [
        ["image/png"],
        ["text/html"],
        ["text/markdown"],
        ["image/svg+xml"],
        ["application/json"],
        ["text/latex"],
    ]
    image, page, markdown, svg, data, latex = (o["data"] for o in result.outputs)
    png(image["image/png"])
    assert page["text/html"] == "<b>bold</b>"
    assert markdown["text/markdown"] == "# Title\n> quoted"
    assert svg["image/svg+xml"].startswith("<svg")
    assert data["application/json"] == {"a": [1, 2]}
    assert latex["text/latex"] == "$x^2$"
    assert all(o["stdout_at"] == 0 for o in result.outputs)


@pytest.mark.parametrize("mode", ["cold", "prestart"])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_dataframe_and_a_pil_image_as_last_expressions(engine: str, mode: str) -> None:
    frame = run(engine, "import pandas as pd\npd.DataFrame({'x': [1, 2]})", mode)
    assert frame.exit_code == 0, frame.stderr
    (table,) = frame.outputs
    assert "<table" in table["data"]["text/html"]
    assert table["data"]["text/plain"].split() == ["x", "0", "1", "1", "2"]
    picture = run(engine, "from PIL import Image\nImage.new('RGB', (3, 2), 'red')", mode)
    assert picture.exit_code == 0, picture.stderr
    (image,) = picture.outputs
    assert png(image["data"]["image/png"])[16:24] == b"\0\0\0\x03\0\0\0\x02"  # 3 x 2


def test_the_last_expression_as_a_notebook_cell_shows_it(tmp_path: Path) -> None:
    cases = {
        "x = 41\nx + 1": ["42"],
        "x = 41\nx + 1;": [],
        "x = 41\nx + 1 ;  # a comment": [],
        "print('printed')": [],  # None is not shown
        "None": [],
        "[1, 'a']\n'last'": ["'last'"],  # only the last statement
        "def f():\n    return 3\nf()": ["3"],
        "if True:\n    5": [],  # not an expression statement
    }
    for code, shown in cases.items():
        result = run("bwrap", code)
        assert result.exit_code == 0, (code, result.stderr)
        assert [o["data"]["text/plain"] for o in result.outputs] == shown, code
    program = tmp_path / "program.py"
    program.write_text("1 + 1")
    file_run = run("bwrap", "1 + 1", file=program)  # a file run: a program, not a cell
    assert file_run.command == ["python", "program.py"]
    assert file_run.exit_code == 0 and file_run.outputs == []


def test_outputs_sit_between_the_text_around_them() -> None:
    code = (
        "import sys\n"
        "print('a')\n"
        "display('one')\n"
        "sys.stdout.write('bb')\n"  # not flushed: display() flushes it first
        "display('two')\n"
        "print('ccc')\n"
        "print('ééé', file=sys.stderr)\n"
        "'three'"
    )
    result = run("bwrap", code)
    assert result.stdout == "a\nbbccc\n" and result.stderr == "ééé\n"
    at = {o["data"]["text/plain"]: o["stdout_at"] for o in result.outputs}
    assert at == {"'one'": 2, "'two'": 4, "'three'": 8}


def test_a_failing_snippet_keeps_its_traceback_and_its_outputs() -> None:
    result = run("bwrap", "display('kept')\ndef f():\n    1 / 0\nf()")
    assert result.exit_code == 1
    assert [o["data"]["text/plain"] for o in result.outputs] == ["'kept'"]
    lines = result.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[1].endswith('/inline.py", line 4, in <module>'), lines  # no shim frame
    assert lines[-1] == "ZeroDivisionError: division by zero"
    exits = run("bwrap", "import sys\ndisplay(1)\nsys.exit(3)")
    assert exits.exit_code == 3 and exits.stderr == "" and len(exits.outputs) == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_the_compiled_shim_stays_out_of_the_snippets_sight(engine: str) -> None:
    """The server's own interpreter gets the shim compiled, through its environment: the
    snippet, its children and its tracebacks see none of it; another interpreter gets
    the shim's text (a marshal is only certain to load in the binary that wrote it)."""
    assert python_command(sys.executable, "inline.py")[2] == SHIM_LOADER
    assert python_command("/opt/python3.12/bin/python3", "inline.py")[2] == shim_source()
    code = (
        "import os, subprocess, sys\n"
        "print(sorted(k for k in os.environ if 'SHIM' in k))\n"
        "child = 'import os; print(sorted(k for k in os.environ if \"SHIM\" in k))'\n"
        "print(subprocess.run([sys.executable, '-c', child], capture_output=True).stdout.decode())"
        "\n"
        "print(sorted(k for k in globals() if not k.startswith('__')))\n"
        "1 / 0"
    )
    result = run(engine, code)
    assert result.stdout == "[]\n[]\n\n['child', 'os', 'subprocess', 'sys']\n", result.stdout
    lines = result.stderr.splitlines()
    assert lines[1].endswith('/inline.py", line 6, in <module>'), lines  # no shim frame


def test_a_bash_snippet_writes_a_frame_with_printf() -> None:
    code = (
        'payload=\'{"data": {"text/markdown": "**hi**"}, "metadata": {}}\'\n'
        "echo before\n"
        'printf "\\036gitpilot-display %s %d\\n%s" "$GITPILOT_DISPLAY" "${#payload}" "$payload"\n'
        "echo after\n"
        # Another nonce is no frame: text, as printed.
        'printf "\\036gitpilot-display %s 2\\nhi\\n" 0123456789abcdef0123456789abcdef\n'
    )
    result = run("bwrap", code, language="bash")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == (
        "before\nafter\n\x1egitpilot-display 0123456789abcdef0123456789abcdef 2\nhi\n"
    )
    (output,) = result.outputs
    assert output["data"] == {"text/markdown": "**hi**"} and output["stdout_at"] == 7


HOSTILE = """
import os, sys
print("start")
display({"image/png": "A" * (100 * 1024 * 1024)}, raw=True)
display({"image/png": "not base64 at all!"}, raw=True)
display({"application/javascript": "alert(1)"}, raw=True)
display({"application/javascript": "alert(1)", "text/plain": "a chart"}, raw=True)
display({"application/vnd.jupyter.widget-view+json": {"model_id": "x"}}, raw=True)
for n in range(10_000):
    display(n)
print("end")
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_hostile_outputs_are_dropped_with_a_note_and_stdout_stays(engine: str) -> None:
    limits = ResourceLimits(memory_mb=1024, max_processes=64, max_file_size_mb=16)
    result = run(engine, HOSTILE, limits=limits)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "start\nend\n"
    kept = result.outputs
    assert len(kept) == 500  # max_display_outputs
    assert kept[0]["data"] == {"text/plain": "a chart"}
    assert [o["data"]["text/plain"] for o in kept[1:3]] == ["0", "1"]
    assert result.notes == [
        "1 display output dropped: larger than 8 MB (max_display_item_mb)",
        "1 display output dropped: image/png is not valid base64",
        "1 display output dropped: no allowed MIME type (it had: application/javascript)",
        (
            "1 display output dropped: no allowed MIME type "
            "(it had: application/vnd.jupyter.widget-view+json)"
        ),
        "9501 display outputs dropped: a run keeps at most 500 (max_display_outputs)",
        "application/javascript left out of a display output: not an allowed type",
    ]


def test_an_install_without_matplotlib_pandas_or_ipython_still_runs(tmp_path: Path) -> None:
    """The shim imports nothing absent: a python with no third-party package at all."""
    import venv

    venv.EnvBuilder(with_pip=False, system_site_packages=False).create(tmp_path / "bare")
    bare = str(tmp_path / "bare" / "bin" / "python")
    backend = NullSandbox(interpreters=Interpreters(python=bare), pool=PoolConfig(mode="off"))
    code = (
        "import sys\n"
        "print(sorted(m for m in ('matplotlib', 'pandas', 'IPython', 'PIL') if m in sys.modules))\n"
        "try:\n    import matplotlib\nexcept ImportError as e:\n    print(type(e).__name__)\n"
        "display({'text/plain': 'fine'}, raw=True)\n"
        "sys.prefix"
    )
    result = asyncio.run(backend.run(request(code)))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "[]\nModuleNotFoundError\n" and result.stderr == ""
    assert [o["data"]["text/plain"] for o in result.outputs] == [
        "fine",
        repr(str(tmp_path / "bare")),
    ]
    assert sys.prefix != str(tmp_path / "bare")
