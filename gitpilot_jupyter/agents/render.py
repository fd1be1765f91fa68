"""Text for models: results, plans waiting for approval, refusals and status.

The layout follows the original product's ``run_in_sandbox`` trace
(``Sandbox:``, ``Command:``, ``Exit code:``, ``Duration:``, ``--- stdout ---``,
``--- stderr ---``, ``sandbox_id:``) so an agent reads a SyntaxError, a
traceback or a timeout as plainly as a person would. Long output keeps its
head and its tail (where tracebacks end) and says how many bytes were left out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..sandbox.output import utf8_boundary
from ..sandbox.plans import ExecutionPlan
from ..sandbox.records import Status
from ..sandbox.results import RunResult

#: Bytes of each stream a model sees by default (head + tail); the sandbox itself keeps 512 KB.
MODEL_OUTPUT_BYTES = 8_000
#: Share of the budget given to the head; the rest goes to the tail, where errors are.
_HEAD_SHARE = 0.3
#: Images of one run a model gets as image content (MCP ``ImageContent``); the rest are named.
MODEL_IMAGES = 8
#: The image types models read; an SVG is described by its text instead.
MODEL_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif")

_BACKEND_NAMES = {
    "subprocess": "subprocess (local process)",
    "matrixlab": "MatrixLab",
    "off": "off (pass-through, no isolation)",
}


def backend_label(backend: str) -> str:
    """The backend as the ``Sandbox:`` line names it."""
    return _BACKEND_NAMES.get(backend, backend)


def shorten(text: str, limit: int = MODEL_OUTPUT_BYTES) -> str:
    """Keep the head and the tail of ``text`` within ``limit`` UTF-8 bytes.

    The cut never splits a character, and the marker states how many bytes were
    left out, so the model knows the middle exists.
    """
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text
    head_end = utf8_boundary(data, int(limit * _HEAD_SHARE))
    tail_start = len(data) - (limit - head_end)
    # Step forward over continuation bytes (10xxxxxx) so the tail starts on a character.
    while tail_start < len(data) and (data[tail_start] & 0xC0) == 0x80:
        tail_start += 1
    left_out = tail_start - head_end
    head = data[:head_end].decode("utf-8", errors="replace")
    tail = data[tail_start:].decode("utf-8", errors="replace")
    if head and not head.endswith("\n"):
        head += "\n"
    return f"{head}[... {left_out} bytes left out ...]\n{tail}"


def _section(name: str, text: str, limit: int) -> list[str]:
    body = shorten(text, limit)
    return [f"--- {name} ---", body.rstrip("\n")]


def render_result(
    result: RunResult,
    *,
    command: str | None = None,
    timeout_sec: int | None = None,
    limit: int = MODEL_OUTPUT_BYTES,
    session: str | None = None,
) -> str:
    """A run as text for a model: header lines, warnings, both streams, ``sandbox_id``.

    For a cell of ``session`` it names the session, says a stopped or timed-out cell was
    interrupted (not killed: the session lives on), and gives the result's notes, which
    say whether the session was lost."""
    lines = [
        f"Sandbox: {backend_label(result.backend)}",
        f"Command: {command or ' '.join(result.command)}",
        f"Exit code: {result.exit_code}",
        f"Duration: {result.duration_ms} ms",
    ]
    if session is not None:
        lines.append(f"Session: {session} (what its cells define stays for its next cells)")
    # A session's cell is interrupted; a run's process is killed.
    ended = "the cell was interrupted" if session is not None else "the process was killed"
    if result.timed_out:
        after = f" after {timeout_sec} s" if timeout_sec else ""
        end = "interrupt" if session is not None else "kill"
        lines.append(
            f"WARNING: Command timed out{after}; {ended} (output printed before the {end} is kept)"
        )
    if result.cancelled:
        lines.append(
            f"WARNING: The run was stopped before it ended (someone pressed Stop); {ended} "
            "(output printed before the stop is kept)"
        )
    if session is not None:
        lines += [f"Note: {note}" for note in result.notes]
    if result.truncated:
        lines.append(
            "WARNING: Output was truncated: the sandbox's per-stream output cap was reached "
            "and the rest was discarded"
        )
    if result.stdout:
        lines += _section("stdout", result.stdout, limit)
    if result.stderr:
        lines += _section("stderr", result.stderr, limit)
    if result.outputs:
        lines += _outputs_section(result.outputs, limit)
    if not result.stdout and not result.stderr and not result.outputs:
        lines.append("(no output)")
    lines.append(f"sandbox_id: {result.sandbox_id or 'none (local run ' + result.run_id + ')'}")
    return "\n".join(lines) + "\n"


def model_images(outputs: Sequence[dict[str, Any]]) -> list[tuple[int, str, str]]:
    """The images a model gets, as ``(output number, MIME type, base64 data)``: the first
    :data:`MODEL_IMAGES` outputs with an image a model reads (one image per output)."""
    images: list[tuple[int, str, str]] = []
    for number, item in enumerate(outputs, 1):
        data = item.get("data") or {}
        mime = next((m for m in MODEL_IMAGE_TYPES if isinstance(data.get(m), str)), None)
        if mime is not None and len(images) < MODEL_IMAGES:
            images.append((number, mime, data[mime]))
    return images


def _image_bytes(encoded: str) -> int:
    """The size of base64 data once decoded (without decoding it)."""
    return len(encoded) * 3 // 4 - encoded[-2:].count("=")


def _outputs_section(outputs: Sequence[dict[str, Any]], limit: int) -> list[str]:
    """One entry per display output: an image says it comes as image content (or why
    not); any other output gives its ``text/plain`` (else its JSON, else its types)."""
    returned = {number for number, _, _ in model_images(outputs)}
    lines = ["--- display outputs ---"]
    for number, item in enumerate(outputs, 1):
        data = item.get("data") or {}
        image = next((m for m in MODEL_IMAGE_TYPES if isinstance(data.get(m), str)), None)
        if image is not None:
            size = _image_bytes(data[image])
            how = (
                "returned as image content"
                if number in returned
                else f"not returned (only the first {MODEL_IMAGES} images are)"
            )
            lines.append(f"[{number}] {image}, {size} bytes: {how}")
            continue
        if isinstance(data.get("text/plain"), str):
            text = data["text/plain"]
        elif "application/json" in data:
            text = json.dumps(data["application/json"])
        else:
            text = "(" + ", ".join(sorted(data)) + ": no text form)"
        lines.append(f"[{number}] " + shorten(text, limit).rstrip("\n"))
    return lines


def outputs_for_model(outputs: Sequence[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The outputs as structured content: text shortened like the streams, each binary
    value replaced by a note of its size (the images go as image content)."""
    shown: list[dict[str, Any]] = []
    for item in outputs:
        data: dict[str, Any] = {}
        for mime, value in (item.get("data") or {}).items():
            if not isinstance(value, str):
                data[mime] = value
            elif mime.startswith("image/") and mime != "image/svg+xml":
                data[mime] = f"[{_image_bytes(value)} bytes]"
            else:
                data[mime] = shorten(value, limit)
        shown.append({**item, "data": data})
    return shown


def describe_plan(plan: ExecutionPlan) -> list[str]:
    """The lines that tell a model (and the human it relays to) what the plan would run."""
    network = "on" if plan.spec.network else "off"
    lines = [
        (
            f"Plan: {plan.goal} · backend {plan.spec.backend} · "
            f"timeout {plan.spec.timeout_sec} s · network {network}"
        ),
    ]
    for warning in plan.warnings:
        lines.append(f"Warning ({warning['severity']}): {warning['label']}: {warning['detail']}")
    return lines


def render_pending(plan: ExecutionPlan, *, where: str, in_process: bool) -> str:
    """A plan that waits for a human, where to approve it, and how to wait for it."""
    plan_id = plan.plan_id
    lines = [f"Approval needed: plan {plan_id} is waiting for a human. Nothing has run yet."]
    lines += describe_plan(plan)
    if in_process:
        lines.append(
            "No Jupyter server is connected, so only this process can approve the plan "
            f"(AgentSandbox.approve({plan_id!r})). To let a person approve it in JupyterLab, a "
            "notebook or a terminal, connect the agent to a Jupyter server "
            "(GITPILOT_JUPYTER_URL and GITPILOT_JUPYTER_TOKEN)."
        )
    else:
        lines.append(
            f"A person can approve it in JupyterLab or a notebook connected to {where}, "
            f"or in a terminal: jupyter sandbox approve {plan_id}"
        )
    lines.append(
        f"Then call wait_for_approval with plan_id {plan_id!r}: "
        "it runs the plan once approved and returns the result."
    )
    lines.append(f"plan_id: {plan_id}")
    return "\n".join(lines) + "\n"


def render_blocked(plan: ExecutionPlan, *, command: str | None = None) -> str:
    """A plan the policy refuses: it can never be approved."""
    shown = command or " ".join(plan.command)
    return (
        f"Refused by policy: {plan.blocked_reason or 'blocked'}. Nothing was run.\n"
        f"Command: {shown}\n"
        "This plan can never be approved; do not retry it. Change the command.\n"
        f"plan_id: {plan.plan_id}\n"
    )


def render_denied(mode_source: str) -> str:
    """Agent runs are switched off."""
    return (
        "Refused: running code in the sandbox is switched off for agents "
        f"(approval mode 'deny', {mode_source}). Nothing was run. "
        "Ask the user to run it, or to change the mode to 'ask' or 'auto'.\n"
    )


def render_not_approved(plan_id: str, reason: str) -> str:
    """A plan that was rejected, evicted or expired before it could run."""
    return f"Not approved: plan {plan_id}: {reason}. Nothing was run.\nplan_id: {plan_id}\n"


def render_still_pending(plan_id: str, waited: float) -> str:
    """The wait ended before anyone decided."""
    return (
        f"Still waiting: nobody approved plan {plan_id} within {waited:g} s. Nothing has run. "
        f"Call wait_for_approval again with plan_id {plan_id!r} to keep waiting.\n"
        f"plan_id: {plan_id}\n"
    )


def render_session_opened(info: dict[str, Any]) -> str:
    """A session just opened: its name, how to run cells in it and how to close it."""
    name = info["name"]
    network = "on" if info.get("network") else "off"
    memory = info.get("memory_mb")
    return (
        f"Session {name} is open: a Python kernel in the sandbox (network {network}"
        f"{f', memory {memory} MB for the whole session' if memory else ''}). "
        "Nothing has run yet.\n"
        f"Run cells in it with run_in_session(session={name!r}, code=...): each cell is "
        "planned and approved like any run, and sees what earlier cells defined. "
        f"Close it with close_session(session={name!r}) when done (idle sessions are "
        "stopped after a while).\n"
        f"session: {name}\n"
    )


def render_session_closed(name: str) -> str:
    """A session stopped: nothing of it is left."""
    return f"Session {name} is closed: its kernel, variables and files are gone.\n"


def render_sessions(sessions: Sequence[dict[str, Any]]) -> str:
    """The open sessions, one line each."""
    if not sessions:
        return "No session is open. open_session starts one.\n"
    lines = ["Open sessions:"]
    for info in sessions:
        network = "on" if info.get("network") else "off"
        lines.append(
            f"- {info['name']}: {info.get('state')}, {info.get('cells', 0)} cells run, "
            f"network {network}"
        )
    return "\n".join(lines) + "\n"


def render_error(code: str, message: str) -> str:
    """A request the sandbox could not accept (unknown language, bad timeout, ...)."""
    return f"Error ({code}): {message}. Nothing was run.\n"


def render_status(status: Status, *, mode: str, where: str) -> str:
    """``sandbox_status`` for a model: backend, health, approval mode, isolation."""
    settings = status.get("settings") or {}
    languages = status.get("languages") or {}
    lines = [
        (
            f"Sandbox: {backend_label(str(status.get('backend')))} "
            f"({'ok' if status.get('ok') else 'NOT OK'})"
        ),
        f"Agent approval mode: {mode}",
        f"Connected to: {where}",
        f"Server requires approval tokens: {str(bool(status.get('require_approval'))).lower()}",
        f"Isolation: {', '.join(status.get('isolation') or []) or 'none'}",
        "Interpreters: "
        + ", ".join(f"{k} {'yes' if v else 'missing'}" for k, v in languages.items()),
        (
            f"Network: {'allowed' if settings.get('allow_network') else 'off'} · "
            f"default timeout {settings.get('timeout_sec')} s"
        ),
    ]
    if status.get("env_override"):
        lines.append(f"Env override: {status['env_override']}")
    if status.get("error"):
        lines.append(f"Error: {status['error']}")
    return "\n".join(lines) + "\n"
