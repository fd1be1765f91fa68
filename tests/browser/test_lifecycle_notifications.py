"""The MatrixLab Runner lifecycle from Sandbox Settings, followed by JupyterLab notifications.

A lab whose server has the lifecycle switched on, on the real Docker engine, with the
locally built stand-in image as the Runner (``scripts/build-test-images.sh``; no Docker
Hub). Install, Start and Stop each report through the lab's Notification API: a toast
while the action runs, then its outcome in words; a failed Start says why, and stays.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.docker.conftest import BASE_IMAGE, RUNNER_IMAGE
from tests.support.system import require_system

from .lab import Lab, free_port, start_lab
from .ui import open_settings_from_menu, screenshot

pytestmark = pytest.mark.browser

#: A Docker call on 2 shared cores (a container start, its health wait) can take a while.
ACTION_SEC = 90


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    """The Docker engine and the locally built images (skip here, fail in CI, without them)."""
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        require_system(
            "docker", False, f"no Docker engine answers ({exc}); scripts/start-dockerd.sh"
        )
        raise
    import docker.errors

    for image in (RUNNER_IMAGE, BASE_IMAGE):
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            require_system("docker test images", False, f"{image}: scripts/build-test-images.sh")
    yield client
    client.close()


@pytest.fixture(scope="module")
def container_name() -> str:
    """The Runner container this module's lab manages (its own, removed at the end)."""
    return "gitpilot-browser-" + secrets.token_hex(4)


@pytest.fixture(scope="module")
def lab(
    tmp_path_factory: pytest.TempPathFactory, docker_client: Any, container_name: str
) -> Iterator[Lab]:
    """A lab whose server may install, start and stop the Runner (the stand-in image)."""
    import docker.errors

    workdir: Path = tmp_path_factory.mktemp("lab-lifecycle")
    env = {
        "GITPILOT_ENABLE_MATRIXLAB_LIFECYCLE": "1",
        "GITPILOT_MATRIXLAB_RUNNER_IMAGE": RUNNER_IMAGE,
        "GITPILOT_MATRIXLAB_SANDBOX_IMAGES": BASE_IMAGE,
        "GITPILOT_MATRIXLAB_CONTAINER": container_name,
        "GITPILOT_MATRIXLAB_JOBS_DIR": str(workdir / "jobs"),
    }
    server = start_lab(workdir, env=env)
    try:
        yield server
    finally:
        server.stop()
        with contextlib.suppress(docker.errors.NotFound):
            docker_client.containers.get(container_name).remove(force=True)


def use_runner_on(lab: Lab, port: int) -> None:
    """Point the saved Runner URL at ``port`` (the lifecycle publishes the Runner there)."""
    answer = lab.api(
        "PUT",
        "api/sandbox/config",
        json={
            "matrixlab_url": f"http://127.0.0.1:{port}",
            "matrixlab_token": "browser-" + secrets.token_urlsafe(12),
        },
    )
    assert answer.status_code == 200, answer.text


def toast(page: Page, text: str | re.Pattern[str]) -> Locator:
    """A JupyterLab notification toast showing ``text``."""
    return page.locator(".Toastify__toast").filter(has_text=text).first


def act(panel: Locator, action: str) -> None:
    """Click a lifecycle button once it is enabled (after the card has loaded its state)."""
    button = panel.locator(f'.jp-gitpilot-lifecycle button[data-action="{action}"]')
    expect(button).to_be_enabled(timeout=30_000)
    button.click()


def test_install_start_and_stop_report_through_notifications(
    lab: Lab, page: Page, docker_client: Any, container_name: str
) -> None:
    use_runner_on(lab, free_port())
    panel = open_settings_from_menu(page)
    state = panel.locator(".jp-gitpilot-lifecycle-state")
    expect(state).to_have_text("Installed · Not running · Docker available", timeout=30_000)

    act(panel, "install")
    expect(toast(page, "The MatrixLab Runner is installed.")).to_be_visible(
        timeout=ACTION_SEC * 1000
    )

    act(panel, "start")
    # While Docker works, a toast says what it is doing (it stays until the outcome).
    expect(toast(page, "Starting the Runner container…")).to_be_visible(timeout=10_000)
    running = toast(page, "The MatrixLab Runner is running.")
    expect(running).to_be_visible(timeout=ACTION_SEC * 1000)
    page.wait_for_timeout(500)  # the toast slides in
    screenshot(page, "lifecycle-notification-light")
    expect(state).to_have_text("Installed · Running · Docker available")
    assert docker_client.containers.get(container_name).status == "running"

    act(panel, "stop")
    stopped = toast(page, "The MatrixLab Runner is stopped.")
    expect(stopped).to_be_visible(timeout=ACTION_SEC * 1000)
    expect(state).to_have_text("Installed · Not running · Docker available")


def test_a_failed_start_says_why_and_stays_on_screen(
    lab: Lab, page: Page, docker_client: Any, container_name: str
) -> None:
    import docker.errors

    with contextlib.suppress(docker.errors.NotFound):
        docker_client.containers.get(container_name).remove(force=True)
    # Something else already listens where the Runner would be published: docker run fails.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        use_runner_on(lab, taken.getsockname()[1])
        panel = open_settings_from_menu(page)
        act(panel, "start")
        failed = toast(page, re.compile(r"^Starting the MatrixLab Runner failed: "))
        expect(failed).to_be_visible(timeout=ACTION_SEC * 1000)
        # Docker's reason, not the command line (that stays in the panel's transcript).
        expect(failed).to_contain_text(re.compile(r"already (in use|allocated)"))
        expect(failed).not_to_contain_text("docker run")
    page.wait_for_timeout(500)
    screenshot(page, "lifecycle-failed-notification-light")
    # An error stays until dismissed (success toasts close by themselves).
    page.wait_for_timeout(6000)
    expect(failed).to_be_visible()
    expect(panel.locator(".jp-gitpilot-transcript")).to_contain_text("docker run")
