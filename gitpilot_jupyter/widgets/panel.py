"""The sandbox settings panel: an ipywidgets view linked to :class:`SandboxSettingsModel`.

Local / MatrixLab / Pass-through, the env override badge, the MatrixLab card
(URL, write-only token, image, network, timeout), Save, Test connection, and the
Runner lifecycle (Install / Start / Stop) with its step transcript.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as ipw

from ..client.local import SandboxClient
from ..sandbox.settings import TOKEN_NOTE
from .model import SandboxSettingsModel

BACKEND_OPTIONS = [("Local", "subprocess"), ("MatrixLab", "matrixlab"), ("Pass-through", "off")]
TOKEN_BULLETS = "••••••••"


def _shown(widget: Any, visible: bool) -> None:
    widget.layout.display = None if visible else "none"


class SandboxSettingsPanel(ipw.VBox):  # type: ignore[misc]
    """The settings panel; every value lives in :attr:`model`, widgets are linked to it."""

    def __init__(self, model: SandboxSettingsModel) -> None:
        self.model = model
        wide = ipw.Layout(width="28em")
        self.backend = ipw.RadioButtons(options=BACKEND_OPTIONS, description="Backend")
        self.env_badge = ipw.HTML()
        #: The backends the administrator does not allow, said as theirs (a Save of one is refused).
        self.backend_note = ipw.HTML()
        self.url = ipw.Text(description="Runner URL", layout=wide)
        self.token = ipw.Password(description="Token", placeholder="bearer token", layout=wide)
        self.token_saved = ipw.HTML(f"<code>{TOKEN_BULLETS}</code> saved")
        self.clear_token = ipw.Button(description="Clear", icon="trash")
        self.token_note = ipw.HTML(
            f"<small style='color:#616161'>{html.escape(TOKEN_NOTE)}</small>"
        )
        self.image = ipw.Text(description="Image", placeholder="Runner default", layout=wide)
        self.network = ipw.Checkbox(description="Allow network egress", indent=False)
        self.timeout = ipw.BoundedIntText(min=1, max=600, description="Timeout (s)")
        self.save = ipw.Button(description="Save", button_style="primary", icon="save")
        self.test = ipw.Button(description="Test connection", icon="plug")
        self.test_result = ipw.HTML()
        self.install = ipw.Button(description="Install", icon="download")
        self.start = ipw.Button(description="Start", icon="play")
        self.stop = ipw.Button(description="Stop", icon="stop")
        self.lifecycle_reason = ipw.HTML()
        self.progress = ipw.IntProgress(value=1, min=0, max=1, bar_style="info")
        self.transcript = ipw.Textarea(disabled=True, layout=ipw.Layout(width="100%", height="8em"))
        self.message = ipw.HTML()
        #: Shown while a Save waits for a yes (switching to off, an unreachable Runner).
        self.confirm = ipw.Button(description="Save anyway", button_style="danger", icon="check")
        self.cancel = ipw.Button(description="Cancel", icon="times")
        self.question = ipw.HBox([self.confirm, self.cancel])

        for trait, widget in (
            ("backend", self.backend),
            ("matrixlab_url", self.url),
            ("token_input", self.token),
            ("matrixlab_image", self.image),
            ("allow_network", self.network),
            ("timeout_sec", self.timeout),
            ("transcript", self.transcript),
        ):
            ipw.link((model, trait), (widget, "value"))
        for trait in ("message", "test_result"):
            ipw.dlink((model, trait), (getattr(self, trait), "value"), html.escape)

        self.save.on_click(lambda _: model.save())
        self.confirm.on_click(lambda _: model.confirm())
        self.cancel.on_click(lambda _: model.cancel())
        self.clear_token.on_click(lambda _: model.clear_token())
        self.test.on_click(lambda _: model.test_connection())
        for action in ("install", "start", "stop"):
            getattr(self, action).on_click(lambda _, a=action: model.run_lifecycle(a))
        model.observe(self._refresh, names=["has_token", "env_override", "allowed_backends"])
        model.observe(self._refresh, names=["busy", "transcript", "question"])
        model.observe(self._refresh, names=["lifecycle_enabled", "lifecycle_reason", "lifecycle"])

        matrixlab = ipw.VBox(
            [
                ipw.HTML("<b>MatrixLab Runner</b>"),
                self.url,
                ipw.HBox([self.token, self.token_saved, self.clear_token]),
                self.token_note,
                self.image,
                ipw.HBox([self.test, self.test_result]),
                ipw.HBox([self.install, self.start, self.stop, self.progress]),
                self.lifecycle_reason,
                self.transcript,
            ],
            layout=ipw.Layout(border="1px solid #ccc", padding="4px", margin="4px 0"),
        )
        super().__init__(
            [
                ipw.HTML(f"<b>Sandbox settings</b> <small>({html.escape(model.path)})</small>"),
                ipw.HBox([self.backend, self.env_badge]),
                self.backend_note,
                matrixlab,
                self.network,
                self.timeout,
                self.save,
                self.message,
                self.question,
            ]
        )
        self._refresh()

    @classmethod
    def for_client(cls, client: SandboxClient) -> SandboxSettingsPanel:
        """A panel loaded from ``client`` (what ``%sandbox settings`` shows)."""
        model = SandboxSettingsModel(client)
        model.load()
        return cls(model)

    def _refresh(self, _change: Any = None) -> None:
        m = self.model
        _shown(self.token_saved, m.has_token)
        _shown(self.clear_token, m.has_token)
        self.token.placeholder = "replace the saved token" if m.has_token else "bearer token"
        refused = [label for label, name in BACKEND_OPTIONS if name not in m.allowed_backends]
        self.backend_note.value = (
            f"<small style='color:#616161'>{html.escape(', '.join(refused))}: set by the "
            "administrator, not allowed here.</small>"
            if refused
            else ""
        )
        env = html.escape(m.env_override)
        self.env_badge.value = (
            f"<span style='background:#fff3cd;padding:2px 6px;border-radius:4px'>"
            f"env override: <code>{env}</code></span>"
            if env
            else ""
        )
        _shown(self.env_badge, bool(env))  # no empty box beside the choice
        _shown(self.progress, m.busy)
        _shown(self.question, bool(m.question))
        self.confirm.description = (
            "Switch to Pass-through" if m.question and m.backend == "off" else "Save anyway"
        )
        _shown(self.transcript, bool(m.transcript))
        for button in (self.save, self.test, self.clear_token):
            button.disabled = m.busy
        usable = m.lifecycle_enabled and not m.lifecycle_reason and not m.busy
        running = bool(m.lifecycle.get("running"))
        self.install.disabled = not usable
        self.start.disabled = not usable or running
        self.stop.disabled = not usable or not running
        for button in (self.install, self.start, self.stop):
            button.tooltip = m.lifecycle_reason or None
        state = m.lifecycle
        summary = (
            f"installed: {state.get('installed')} · running: {state.get('running')} · "
            f"Docker: {state.get('docker_available')}"
            if state
            else ""
        )
        reason = html.escape(m.lifecycle_reason)
        self.lifecycle_reason.value = f"<small>{html.escape(summary)}</small>" + (
            f"<div><i>{reason}</i></div>" if reason else ""
        )
