"""The settings panel, headless: links, Save, the write-only token, lifecycle buttons, Test."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import ipywidgets as ipw
import pytest

from gitpilot_jupyter.client.local import LocalClient
from gitpilot_jupyter.widgets.model import LIFECYCLE_FLAG, SandboxSettingsModel
from gitpilot_jupyter.widgets.panel import SandboxSettingsPanel


def saved(config_dir: Path) -> dict[str, Any]:
    path = config_dir / "settings.json"
    return json.loads(path.read_text())["sandbox"] if path.exists() else {}


def walk(widget: Any) -> Iterator[Any]:
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def every_value(panel: SandboxSettingsPanel) -> list[str]:
    """Every string a widget of the panel holds (what could reach the browser)."""
    values: list[str] = []
    for widget in walk(panel):
        for name in widget.keys:
            value = getattr(widget, name, None)
            if isinstance(value, str):
                values.append(value)
            elif isinstance(value, (list, tuple)):
                values.extend(str(v) for v in value)
    return values


@pytest.fixture
def panel(client: LocalClient) -> SandboxSettingsPanel:
    return SandboxSettingsPanel.for_client(client)


def test_the_panel_shows_the_settings(panel: SandboxSettingsPanel) -> None:
    assert panel.backend.value == "subprocess"
    assert panel.backend._options_labels == ("Local", "MatrixLab", "Pass-through")
    assert panel.url.value == "http://localhost:8765"
    assert panel.timeout.value == 120
    assert panel.network.value is False
    assert panel.env_badge.value == "" and panel.env_badge.layout.display == "none"
    assert panel.token_saved.layout.display == "none"


def test_model_and_view_are_linked_both_ways(panel: SandboxSettingsPanel) -> None:
    panel.backend.value = "matrixlab"
    assert panel.model.backend == "matrixlab"
    panel.model.timeout_sec = 45
    assert panel.timeout.value == 45
    panel.image.value = "my/python:1"
    assert panel.model.matrixlab_image == "my/python:1"
    panel.model.allow_network = True
    assert panel.network.value is True


def test_off_is_the_administrators_and_is_not_asked_for(
    panel: SandboxSettingsPanel, sandbox_config_dir: Path
) -> None:
    assert "Pass-through: set by the administrator" in panel.backend_note.value
    panel.backend.value = "off"
    panel.save.click()
    # No question to answer: the save is refused at once, with how to allow it.
    assert panel.question.layout.display == "none"
    assert "'off' is not allowed here" in panel.model.message
    assert "GITPILOT_SANDBOX_ALLOWED_BACKENDS" in panel.model.message
    assert saved(sandbox_config_dir) == {}


@pytest.mark.usefixtures("allow_off")
def test_save_writes_only_what_the_user_changed(
    panel: SandboxSettingsPanel, sandbox_config_dir: Path
) -> None:
    assert panel.backend_note.value == ""  # every backend allowed: nothing to say
    panel.timeout.value = 30
    panel.backend.value = "off"
    panel.save.click()
    # Pass-through asks first: nothing is saved until the user says yes.
    assert saved(sandbox_config_dir) == {}
    assert panel.question.layout.display is None
    assert "No isolation: runs on the host as you, network not blocked" in panel.message.value
    assert panel.confirm.description == "Switch to Pass-through"
    panel.confirm.click()
    assert saved(sandbox_config_dir) == {"timeout_sec": 30, "backend": "off"}
    # Saved, but said as a warning: nothing is contained from now on.
    assert panel.message.value == (
        "⚠ Saved backend, timeout_sec. Runs are no longer contained "
        "(no isolation: runs on the host as you, network not blocked)."
    )
    assert panel.question.layout.display == "none"
    panel.save.click()
    assert "Nothing to save" in panel.message.value
    panel.timeout.value = 40
    panel.save.click()
    assert panel.message.value.startswith("⚠ Saved timeout_sec. Runs are still not contained")


@pytest.mark.usefixtures("allow_off")
def test_cancelling_the_switch_to_off_leaves_the_settings_as_they_were(
    panel: SandboxSettingsPanel, sandbox_config_dir: Path
) -> None:
    panel.backend.value = "off"
    panel.save.click()
    panel.cancel.click()
    assert saved(sandbox_config_dir) == {}
    assert panel.backend.value == "subprocess" and "Not saved" in panel.message.value
    assert panel.question.layout.display == "none"


class Recording(LocalClient):
    """The real in-process client, remembering what each Save sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[dict[str, object]] = []

    async def configure(self, changes: Any, *, confirm: bool = False) -> dict[str, Any]:
        self.sent.append(dict(changes))
        return await super().configure(changes, confirm=confirm)


def test_save_sends_only_the_fields_that_changed() -> None:
    client = Recording()
    panel = SandboxSettingsPanel.for_client(client)
    panel.timeout.value = 45
    panel.save.click()
    panel.network.value = True
    panel.url.value = "http://127.0.0.1:9"
    panel.url.value = "http://localhost:8765"  # typed, then put back: not a change
    panel.save.click()
    assert client.sent == [{"timeout_sec": 45}, {"allow_network": True}]


def test_saving_matrixlab_right_after_not_reachable_warns(
    panel: SandboxSettingsPanel, sandbox_config_dir: Path
) -> None:
    panel.url.value = "http://127.0.0.1:9"  # nothing listens there
    panel.test.click()
    assert panel.test_result.value.startswith("✗ not usable")
    panel.backend.value = "matrixlab"
    panel.save.click()
    assert saved(sandbox_config_dir) == {}
    assert "was not reachable when you tested it" in panel.message.value
    assert panel.confirm.description == "Save anyway"
    panel.confirm.click()  # the user insists: it is saved, as asked
    assert saved(sandbox_config_dir) == {
        "backend": "matrixlab",
        "matrixlab_url": "http://127.0.0.1:9",
    }


def test_invalid_values_are_refused_with_a_message(
    panel: SandboxSettingsPanel, sandbox_config_dir: Path
) -> None:
    panel.url.value = "localhost:8765"
    panel.save.click()
    assert "http:// or https://" in panel.message.value
    assert saved(sandbox_config_dir) == {}


def test_token_is_write_only(panel: SandboxSettingsPanel, sandbox_config_dir: Path) -> None:
    secret = "tok-" + "7" * 24
    panel.token.value = secret
    panel.save.click()
    assert saved(sandbox_config_dir)["matrixlab_token"] == secret
    assert panel.model.has_token
    assert panel.token.value == ""
    assert panel.token_saved.layout.display is None  # the bullets show
    assert "••••••••" in panel.token_saved.value
    assert not any(secret in value for value in every_value(panel))
    assert secret not in repr(panel.model.trait_values())

    # Reloading the panel from the saved settings never reads the token back.
    fresh = SandboxSettingsPanel.for_client(panel.model.client)
    assert fresh.model.has_token
    assert not any(secret in value for value in every_value(fresh))

    panel.clear_token.click()
    assert "matrixlab_token" not in saved(sandbox_config_dir)
    assert not panel.model.has_token
    assert panel.clear_token.layout.display == "none"


def test_env_override_badge_and_env_values_never_saved(
    monkeypatch: pytest.MonkeyPatch, client: LocalClient, sandbox_config_dir: Path
) -> None:
    monkeypatch.setenv("GITPILOT_MATRIXLAB_TOKEN", "from-the-env-123456")
    monkeypatch.setenv("GITPILOT_MATRIXLAB_URL", "http://runner.internal:8765")
    panel = SandboxSettingsPanel.for_client(client)
    assert "GITPILOT_MATRIXLAB_URL" in panel.env_badge.value
    assert panel.env_badge.layout.display is None  # shown
    assert panel.model.has_token
    panel.timeout.value = 50
    panel.save.click()
    assert saved(sandbox_config_dir) == {"timeout_sec": 50}
    assert not any("from-the-env-123456" in v for v in every_value(panel))


def test_lifecycle_buttons_follow_the_flag(
    monkeypatch: pytest.MonkeyPatch, client: LocalClient
) -> None:
    panel = SandboxSettingsPanel.for_client(client)
    assert panel.install.disabled and panel.start.disabled and panel.stop.disabled
    assert LIFECYCLE_FLAG in panel.lifecycle_reason.value
    assert LIFECYCLE_FLAG in (panel.install.tooltip or "")

    monkeypatch.setenv(LIFECYCLE_FLAG, "1")
    panel.model.refresh_lifecycle()
    assert LIFECYCLE_FLAG not in panel.lifecycle_reason.value
    if panel.model.lifecycle.get("docker_available"):
        assert not panel.install.disabled
        assert panel.start.disabled != panel.stop.disabled  # one of them, by running state
    else:
        assert panel.install.disabled
        assert "Docker is not available" in panel.lifecycle_reason.value


def test_a_refused_lifecycle_action_shows_why(client: LocalClient) -> None:
    model = SandboxSettingsModel(client)
    model.load()
    model.run_lifecycle("start")  # the flag is off: the core refuses
    assert LIFECYCLE_FLAG in model.message
    assert "start refused" in model.transcript


def test_test_connection_against_the_runner(
    panel: SandboxSettingsPanel, runner_standin: Any, sandbox_config_dir: Path
) -> None:
    panel.url.value = runner_standin.url
    panel.token.value = runner_standin.token
    panel.test.click()
    assert panel.test_result.value.startswith("✓ connected")
    assert saved(sandbox_config_dir) == {}  # testing saves nothing

    panel.token.value = "wrong-token"
    panel.test.click()
    assert panel.test_result.value.startswith("✗ not usable")
    assert "token" in panel.test_result.value.lower()


def test_test_connection_to_nothing_gives_a_hint(panel: SandboxSettingsPanel) -> None:
    panel.url.value = "http://127.0.0.1:9"
    panel.test.click()
    assert panel.test_result.value.startswith("✗ not usable")
    assert "—" in panel.test_result.value  # followed by a hint


def test_progress_shows_only_while_busy(panel: SandboxSettingsPanel) -> None:
    assert panel.progress.layout.display == "none"
    seen: list[Any] = []
    panel.model.observe(lambda c: seen.append((c.new, panel.progress.layout.display)), "busy")
    panel.test.click()
    assert seen[0] == (True, None) and seen[-1] == (False, "none")


def test_panel_is_a_widget(panel: SandboxSettingsPanel) -> None:
    assert isinstance(panel, ipw.VBox)
    assert panel.model.path == "in-process"


def test_the_panel_says_where_the_token_goes(panel: SandboxSettingsPanel) -> None:
    """The panel (and the lab's, with the same words) says a new URL drops the saved token."""
    import re

    from gitpilot_jupyter.sandbox.settings import TOKEN_NOTE

    assert "saving a new URL clears it" in TOKEN_NOTE
    assert any(TOKEN_NOTE in value for value in every_value(panel))
    labels = (Path(__file__).parents[2] / "labextension" / "src" / "labels.ts").read_text()
    declared = labels.split("export const TOKEN_NOTE =", 1)[1].split(";", 1)[0]
    assert "".join(re.findall(r"'([^']*)'", declared)) == TOKEN_NOTE
