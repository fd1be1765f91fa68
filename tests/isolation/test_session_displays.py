"""A session cell's displays: checked as a run's, in its outputs, under the same caps."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest

from gitpilot_jupyter.sandbox.local.backends import SubprocessSandbox
from gitpilot_jupyter.sandbox.rich import DISPLAY_STREAM, DisplayCaps, parse_display
from gitpilot_jupyter.sandbox.rich.wire import BACKEND_MODULE
from gitpilot_jupyter.sandbox.sessions import SessionManager

from .sessionkit import LIMITS, cell, start_request, with_sessions


def test_a_cells_displays_are_checked_as_a_runs_and_come_back_in_its_outputs(
    bwrap: SubprocessSandbox,
) -> None:
    pytest.importorskip("matplotlib", reason="the kernel's matplotlib is this interpreter's")

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request(limits=LIMITS))
        streamed: list[dict[str, Any]] = []

        async def on_output(stream: str, text: str) -> None:
            if stream == DISPLAY_STREAM:
                streamed.append(parse_display(text))

        # The kernel runs without the display shim: no nonce, ipykernel's own matplotlib.
        env = await manager.run_cell(
            cell(
                "nb",
                "import os, sys\nprint(os.environ.get('GITPILOT_DISPLAY'), "
                "os.environ.get('MPLBACKEND'), sys.argv[-1])",
            ),
            user=None,
        )
        assert env.result.stdout.split()[:2] == [
            "None",
            "module://matplotlib_inline.backend_inline",
        ]
        assert BACKEND_MODULE not in env.result.stdout, env.result.stdout
        plot = await manager.run_cell(
            cell(
                "nb",
                "import matplotlib.pyplot as plt\nprint('before')\n"
                "plt.plot([1, 2, 3]); plt.show()\nprint('after')\n6 * 7",
            ),
            user=None,
            on_output=on_output,
        )
        result = plot.result
        assert result.exit_code == 0, result.stderr
        assert result.stdout == "before\nafter\n" and not result.notes
        image, last = result.outputs
        assert image["output_type"] == "display_data" and image["stdout_at"] == len("before\n")
        assert base64.b64decode(image["data"]["image/png"]).startswith(b"\x89PNG")
        assert last["data"] == {"text/plain": "42"} and last["stdout_at"] == len(result.stdout)
        assert streamed == result.outputs and result.to_dict()["outputs"] == result.outputs
        script = await manager.run_cell(
            cell(
                "nb",
                "from IPython.display import display\n"
                "display({'application/javascript': 'alert(1)'}, raw=True)\n"
                "display({'application/javascript': 'alert(2)', 'text/plain': 'shown'}, raw=True)",
            ),
            user=None,
        )
        assert script.result.outputs == [
            {
                "output_type": "display_data",
                "data": {"text/plain": "shown"},
                "metadata": {},
                "stdout_at": 0,
            }
        ]
        assert script.result.notes == [
            "1 display output dropped: no allowed MIME type (it had: application/javascript)",
            "application/javascript left out of a display output: not an allowed type",
        ]

    with_sessions(bwrap, body)


def test_a_cells_display_past_its_cap_is_dropped_with_the_note(bwrap: SubprocessSandbox) -> None:
    big = dataclasses.replace(LIMITS, memory_mb=768, display=DisplayCaps(item_mb=8))

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request(limits=big))
        # 100 MB of (valid) base64 PNG text, then a small display the cell still shows.
        over = await manager.run_cell(
            cell(
                "nb",
                "from IPython.display import display\n"
                "display({'image/png': 'A' * (100 * 2**20)}, raw=True)\n"
                "display({'text/plain': 'small'}, raw=True)",
                timeout_sec=60,
            ),
            user=None,
        )
        assert over.result.exit_code == 0 and not over.lost, over.result.stderr
        assert [item["data"] for item in over.result.outputs] == [{"text/plain": "small"}]
        assert over.result.notes == [
            "1 display output dropped: larger than 8 MB (max_display_item_mb)"
        ]

    with_sessions(bwrap, body)


def test_a_sessions_display_count_cap_holds_per_cell(bwrap: SubprocessSandbox) -> None:
    few = dataclasses.replace(LIMITS, display=DisplayCaps(outputs=3))

    async def body(manager: SessionManager) -> None:
        await manager.start("nb", owner=None, request=start_request(limits=few))
        code = "for n in range(5):\n    display(n)"
        for _ in range(2):  # the next cell has its own count
            shown = await manager.run_cell(cell("nb", code), user=None)
            assert [item["data"] for item in shown.result.outputs] == [
                {"text/plain": str(n)} for n in range(3)
            ]
            assert shown.result.notes == [
                "2 display outputs dropped: a run keeps at most 3 (max_display_outputs)"
            ]

    with_sessions(bwrap, body)
