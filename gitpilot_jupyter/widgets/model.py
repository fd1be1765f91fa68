"""The settings panel's model: plain traitlets, no widgets, driven through a kernel client.

The view (:mod:`.panel`) binds its widgets to these traits with links; the
model talks to the sandbox (in-process or REST) and holds what the panel shows.
The saved token is never held here: only ``has_token``. What the user types as
a new token lives in ``token_input`` until Save, which empties it.
"""

from __future__ import annotations

from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

from traitlets import Bool, Dict, HasTraits, Int, List, Unicode

from ..client.local import SandboxClient
from ..sandbox.errors import SandboxError
from ..sandbox.local.off import OFF_RISK, is_off, off_confirmation
from ..sandbox.matrixlab.config import LIFECYCLE_FLAG
from ..sandbox.settings import BACKENDS, MAX_TIMEOUT_SEC, SandboxSettings
from ..sandbox.sync import run_sync

T = TypeVar("T")

_DEFAULTS = SandboxSettings()

#: Settings the panel edits; only those the user changed are saved.
EDITABLE = ("backend", "matrixlab_url", "matrixlab_image", "allow_network", "timeout_sec")


def format_steps(steps: list[dict[str, Any]]) -> str:
    """A lifecycle answer's steps as a shell-like transcript."""
    lines: list[str] = []
    for step in steps:
        lines.append(f"$ {step.get('cmd', '')}   # exit {step.get('exit_code')}, "
                     f"{step.get('duration_ms', 0)} ms")  # fmt: skip
        for stream in ("stdout", "stderr"):
            text = str(step.get(stream) or "").rstrip()
            if text:
                lines.append(text)
    return "\n".join(lines)


def format_test(report: dict[str, Any]) -> str:
    """Test connection's answer in one line: verdict, latency, version, Docker, hint."""
    parts = ["✓ connected" if report.get("ok") else "✗ not usable"]
    if report.get("error"):
        parts.append(str(report["error"]))
    if report.get("latency_ms") is not None:
        parts.append(f"{round(float(report['latency_ms']))} ms")
    if report.get("version"):
        parts.append(f"Runner {report['version']}")
    if report.get("docker_ok") is not None:
        parts.append("Docker ok" if report["docker_ok"] else "Docker NOT ok")
    text = " · ".join(parts)
    if report.get("hint"):
        text += f" — {report['hint']}"
    return text


class SandboxSettingsModel(HasTraits):
    """What the settings panel shows and edits."""

    # The settings' own defaults, until the first refresh reads the saved ones.
    backend = Unicode(
        _DEFAULTS.backend, help="subprocess (Local), matrixlab or off (Pass-through)."
    )
    matrixlab_url = Unicode(_DEFAULTS.matrixlab_url, help="The MatrixLab Runner's URL.")
    matrixlab_image = Unicode(
        _DEFAULTS.matrixlab_image, help="Default image ('' = the Runner's per-language default)."
    )
    allow_network = Bool(_DEFAULTS.allow_network, help="Let snippets reach the network.")
    timeout_sec = Int(
        _DEFAULTS.timeout_sec, help=f"Default timeout of a run, 1..{MAX_TIMEOUT_SEC} s."
    )
    token_input = Unicode("", help="A new bearer token typed by the user; emptied on Save.")
    has_token = Bool(False, help="Whether a token is saved (the token itself is never read).")
    env_override = Unicode("", help="The env var that shadows the saved choice ('' = none).")
    allowed_backends = List(
        Unicode(),
        default_value=list(BACKENDS),
        help="The backends the administrator allows (the others are set by the administrator).",
    )
    message = Unicode("", help="The outcome of the last action, for the user.")
    test_result = Unicode("", help="Test connection's verdict and hint.")
    lifecycle_enabled = Bool(False, help=f"Whether {LIFECYCLE_FLAG}=1 allows Install/Start/Stop.")
    lifecycle_reason = Unicode("", help="Why the lifecycle buttons are disabled.")
    lifecycle = Dict(help="The last lifecycle inspection (installed, running, docker...).")
    transcript = Unicode("", help="The steps of the last lifecycle action.")
    busy = Bool(False, help="True while an action runs (the view shows progress).")
    path = Unicode("", help="Which path the client takes: in-process or REST.")
    question = Unicode(
        "",
        help="A Save that needs a yes first (switching to off, an unreachable Runner); "
        "confirm() saves, cancel() drops it ('' = none).",
    )
    test_ok = Bool(None, allow_none=True, help="The last Test connection's verdict (None: none).")
    tested_url = Unicode("", help="The URL the last Test connection tried.")

    def __init__(self, client: SandboxClient, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client = client
        self.path = client.path
        self._loaded: dict[str, Any] = {}
        self._pull_lines: dict[str, str] = {}

    def _call(self, coro: Coroutine[Any, Any, T]) -> T | None:
        """Run one client call; a typed error becomes the panel's message."""
        self.busy = True
        try:
            return run_sync(coro)
        except SandboxError as exc:
            self.message = f"⚠ {exc.message}"
            return None
        finally:
            self.busy = False

    def _apply_status(self, status: Mapping[str, Any]) -> None:
        settings = status.get("settings", {})
        for key in EDITABLE:
            if key in settings:
                setattr(self, key, settings[key])
        self._loaded = {key: getattr(self, key) for key in EDITABLE}
        self.has_token = bool(status.get("has_token", settings.get("has_token")))
        self.env_override = status.get("env_override") or ""
        self.allowed_backends = list(status.get("allowed_backends", self.allowed_backends))

    def load(self) -> None:
        """Read the status and the lifecycle state from the sandbox."""
        status = self._call(self.client.status())
        if status is not None:
            self._apply_status(status)
        self.refresh_lifecycle()

    def refresh_lifecycle(self) -> None:
        """Inspect the Runner's lifecycle (always safe); set the buttons' enabled state."""
        try:
            state = run_sync(self.client.lifecycle("status"))
        except SandboxError as exc:
            self.lifecycle, self.lifecycle_enabled = {}, False
            self.lifecycle_reason = f"lifecycle unavailable: {exc.message}"
            return
        self.lifecycle = state
        self.lifecycle_enabled = bool(state.get("lifecycle_enabled"))
        if not self.lifecycle_enabled:
            self.lifecycle_reason = (
                f"Install / Start / Stop are off: set {LIFECYCLE_FLAG}=1 where the sandbox runs."
            )
        elif not state.get("docker_available"):
            why = state.get("docker_error") or "no Docker engine answers"
            self.lifecycle_reason = f"Docker is not available where the sandbox runs: {why}"
        else:
            self.lifecycle_reason = ""

    def changes(self) -> dict[str, object]:
        """What the user changed since the last load, plus a typed token."""
        changed: dict[str, object] = {
            key: getattr(self, key)
            for key in EDITABLE
            if getattr(self, key) != self._loaded.get(key)
        }
        if self.token_input:
            changed["matrixlab_token"] = self.token_input
        return changed

    def save_question(self, changes: dict[str, object]) -> str | None:
        """What to ask before saving ``changes``, or None when they can be saved at once."""
        question = off_confirmation(
            changes, str(self._loaded.get("backend", self.backend)), self.allowed_backends
        )
        if question is not None:
            return question
        if (
            self.backend == "matrixlab"
            and ("backend" in changes or "matrixlab_url" in changes)
            and self.test_ok is False
            and self.tested_url == self.matrixlab_url
        ):
            return (
                f"The Runner at {self.matrixlab_url} was not reachable when you tested it: "
                "with MatrixLab saved, every run fails until it answers. "
                "Save anyway, or start the Runner (Install / Start) first?"
            )
        return None

    def save(self, *, confirmed: bool = False) -> None:
        """Persist only what the user changed; the typed token is sent once, then forgotten.

        Switching to ``off``, or to a Runner that just failed its test, asks first:
        :attr:`question` holds the question and nothing is saved until :meth:`confirm`.
        """
        changes = self.changes()
        if not changes:
            self.token_input = ""
            self.message = "Nothing to save."
            return
        question = None if confirmed else self.save_question(changes)
        if question is not None:
            self.question = question
            self.message = f"⚠ {question} Nothing is saved yet."
            return
        self.question = ""
        self.token_input = ""
        # ``confirmed``: the user said yes to the question shown (switching to off included).
        status = self._call(self.client.configure(changes, confirm=confirmed))
        if status is not None:
            self._apply_status(status)
            self.message = f"Saved {', '.join(sorted(changes))}."
            if is_off(status.get("backend")):  # saved, but nothing is contained from now on
                now = "no longer" if "backend" in changes else "still not"
                self.message = f"⚠ {self.message} Runs are {now} contained ({OFF_RISK})."
            self.refresh_lifecycle()  # the Runner URL or token may have changed

    def confirm(self) -> None:
        """Yes to :attr:`question`: save what was asked."""
        if self.question:
            self.save(confirmed=True)

    def cancel(self) -> None:
        """No to :attr:`question`: nothing is saved and the fields go back to the saved values."""
        if not self.question:
            return
        self.question = ""
        self.token_input = ""
        for key, value in self._loaded.items():
            setattr(self, key, value)
        self.message = "Not saved: the settings are as they were."

    def clear_token(self) -> None:
        """Remove the saved bearer token."""
        self.token_input = ""
        status = self._call(self.client.configure({"matrixlab_token": ""}))
        if status is not None:
            self._apply_status(status)
            self.message = "Token cleared."

    def test_connection(self) -> None:
        """Test the Runner at the URL shown, with the typed token if any (not saved)."""
        report = self._call(
            self.client.test_matrixlab(url=self.matrixlab_url, token=self.token_input or None)
        )
        if report is not None:
            self.test_result = format_test(report)
            self.test_ok = bool(report.get("ok"))
            self.tested_url = self.matrixlab_url

    async def _progress(self, event: dict[str, Any]) -> None:
        # Docker reports every layer many times: keep one live line per image and layer.
        key = f"{event.get('image', '')} {event.get('id', '')}".strip()
        line = f"{key}: {event.get('status', '')}"
        if event.get("total"):
            line += f" {event.get('current', 0)}/{event['total']}"
        self._pull_lines[key] = line
        self.transcript = "install…\n" + "\n".join(self._pull_lines.values())

    def run_lifecycle(self, action: str) -> None:
        """``install``, ``start`` or ``stop`` the Runner; keep the step transcript."""
        self.transcript = f"{action}…"
        self._pull_lines = {}
        answer = self._call(self.client.lifecycle(action, progress=self._progress))
        if answer is not None:
            verdict = "done" if answer.get("ok", True) else "FAILED"
            self.transcript = f"{action} {verdict}\n{format_steps(answer.get('steps', []))}"
            self.message = f"{action.capitalize()} {verdict}."
        else:
            self.transcript = f"{action} refused: {self.message}"
        self.refresh_lifecycle()
