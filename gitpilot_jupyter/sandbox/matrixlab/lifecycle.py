"""Install, start, stop and inspect the MatrixLab Runner container with the Docker SDK for Python.

``docker`` is imported lazily (the ``docker`` extra): without it, or without an
engine that answers, the mutating calls raise :class:`DockerUnavailable` (503)
and ``status`` says so. Every blocking SDK call runs in a worker thread, never
on the event loop. Every answer carries ``steps``: each Docker call written as
the equivalent ``docker`` command line with its exit code, output and duration.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import DockerUnavailable
from .backend import MatrixLabSandbox
from .config import (
    JOBS_MAX_AGE_SEC,
    RUNNER_DOCKER_SOCKET,
    STATE_ENV,
    TOKEN_ENV,
    LifecycleConfig,
    instructions,
    lifecycle_enabled,
    require_enabled,
    run_command_line,
    runner_environment,
    state_path,
)
from .docker_steps import (
    MANAGED_LABEL,
    StepFailed,
    Transcript,
    container_logs,
    docker_client,
    elapsed_ms,
    error_text,
    find_container,
    has_image,
    is_managed,
    stale_reasons,
)
from .jobs import prune_job_folders
from .ops import ProgressCallback

_END = object()
_HEALTH_POLL_SEC = 0.3
#: Bytes of randomness in a token ``start`` makes when none is set.
TOKEN_BYTES = 32
#: Saves a token ``start`` made as ``matrixlab_token`` (write-only, where the settings keep it).
SaveToken = Callable[[str], object]


def _crashed(container: Any) -> bool:
    """Exited, dead, or restarting after an exit: it will not answer by itself."""
    restarts = (container.attrs or {}).get("RestartCount") or 0
    return container.status in ("exited", "dead", "restarting") or restarts > 0


class MatrixLabLifecycle:
    """The Runner container's lifecycle for one configuration and one Runner URL."""

    def __init__(
        self,
        config: LifecycleConfig,
        *,
        url: str,
        token: str = "",
        environ: Mapping[str, str] | None = None,
        config_dir: Path | None = None,
        save_token: SaveToken | None = None,
    ) -> None:
        self.config = config
        self.url = url.rstrip("/")
        self.token = token
        self.save_token = save_token
        self.environ = os.environ if environ is None else environ
        self.jobs_dir = config.jobs_path(config_dir or Path.home() / ".gitpilot")
        #: Something the user should fix although the action succeeded.
        self.warning: str | None = None

    def _backend(self, url: str) -> MatrixLabSandbox:
        """A backend for the lifecycle's Runner at ``url``: its health probe's snippet
        leaves none of the Runner's copies behind either."""
        return MatrixLabSandbox(
            url=url,
            token=self.token,
            environ=self.environ,
            jobs_dir=self.jobs_dir,
            runner_container=self.config.container_name,
            managed=True,
        )

    # -- inspection -----------------------------------------------------------------------

    async def status(self) -> dict[str, Any]:
        """Installed, running, Docker available, enabled, images, container, URL, instructions."""
        health = await self._backend(self.url).health()
        answer: dict[str, Any] = {
            "lifecycle_enabled": lifecycle_enabled(self.environ),
            "docker_available": False,
            "docker_error": None,
            "installed": False,  # unknown without Docker; a UI reads it as "not installed"
            # Up and healthy; a refused token or a failing snippet is something to fix,
            # not a Runner that is down.
            "running": bool(health["ok"])
            or health.get("token") in ("rejected", "required")
            or health.get("run") is False,
            "health_error": health["error"],
            "url": self.url,
            "host_port": self.config.port_for(self.url),
            "container_name": self.config.container_name,
            "container": None,
            "runner_image": self.config.runner_image,
            "images": [
                {"role": role, "name": name, "present": None} for role, name in self.config.images()
            ],
            "jobs_dir": self.jobs_dir,
            "instructions": instructions(self.config, self.url, self.jobs_dir, bool(self.token)),
            "steps": [],
        }
        try:
            client = await asyncio.to_thread(docker_client)
        except DockerUnavailable as exc:
            answer["docker_error"] = exc.message
            return answer
        try:
            answer["docker_available"] = True
            for image in answer["images"]:
                image["present"] = await asyncio.to_thread(has_image, client, image["name"])
            answer["installed"] = answer["images"][0]["present"]
            answer["container"] = await asyncio.to_thread(self._container_info, client)
        finally:
            await asyncio.to_thread(client.close)
        return answer

    def _container_info(self, client: Any) -> dict[str, Any] | None:
        container = find_container(client, self.config.container_name)
        if container is None:
            return None
        return {
            "name": container.name,
            "id": container.short_id,
            "state": container.status,
            "image": (container.attrs.get("Config") or {}).get("Image"),
            # What ``start`` would replace it for (a token or image that changed).
            "stale": self._stale(client, container),
        }

    def _stale(self, client: Any, container: Any) -> list[str]:
        config = self.config
        return stale_reasons(
            client,
            container,
            image=config.runner_image,
            token_env=TOKEN_ENV,
            token=self.token,
            port=(config.bind_address, config.port_for(self.url)),
            container_port=config.container_port,
            # One made before the state folder moved to the jobs folder keeps every copy.
            settings={STATE_ENV: state_path(self.jobs_dir)},
        )

    # -- actions --------------------------------------------------------------------------

    async def _act(
        self, action: str, body: Callable[[Any, Transcript], Awaitable[None]]
    ) -> dict[str, Any]:
        require_enabled(self.environ)
        client = await asyncio.to_thread(docker_client)
        transcript = Transcript()
        error: str | None = None
        try:
            await body(client, transcript)
        except StepFailed as exc:
            error = str(exc)
        finally:
            await asyncio.to_thread(client.close)
        answer = await self.status()
        answer.update(action=action, ok=error is None, error=error, steps=transcript.steps)
        if self.warning:
            answer["warning"] = self.warning
        return answer

    async def install(self, progress: ProgressCallback | None = None) -> dict[str, Any]:
        """Pull the runner and sandbox images that are not present yet; report progress."""

        async def body(client: Any, transcript: Transcript) -> None:
            failures: list[str] = []
            for _, image in self.config.images():
                if await asyncio.to_thread(has_image, client, image):
                    transcript.add(f"docker image inspect {shlex.quote(image)}", 0, "present")
                    if progress is not None:
                        await progress({"image": image, "status": "already present"})
                    continue
                try:
                    await self._pull(client, image, transcript, progress)
                except StepFailed as exc:
                    failures.append(f"{image}: {exc}")
            if failures:
                raise StepFailed("could not pull " + "; ".join(failures))

        return await self._act("install", body)

    async def _pull(
        self, client: Any, image: str, transcript: Transcript, progress: ProgressCallback | None
    ) -> None:
        from docker.utils import parse_repository_tag

        repository, tag = parse_repository_tag(image)
        started = time.monotonic()
        lines: list[str] = []
        try:
            events = await asyncio.to_thread(
                client.api.pull, repository, tag=tag or "latest", stream=True, decode=True
            )
            iterator = iter(events)
            while True:
                event: Any = await asyncio.to_thread(next, iterator, _END)
                if event is _END:
                    break
                if "error" in event:
                    raise RuntimeError(event["error"])
                status = str(event.get("status", ""))
                if status and "id" not in event:
                    lines.append(status)
                if progress is not None:
                    await progress({"image": image, **event})
        except Exception as exc:
            transcript.add(
                f"docker pull {shlex.quote(image)}",
                1,
                "\n".join(lines),
                error_text(exc),
                elapsed_ms(started),
            )
            raise StepFailed(error_text(exc)) from exc
        transcript.add(
            f"docker pull {shlex.quote(image)}", 0, "\n".join(lines), ms=elapsed_ms(started)
        )

    async def start(self) -> dict[str, Any]:
        """Run the Runner container detached (idempotent by name), then wait for ``/health``."""

        async def body(client: Any, transcript: Transcript) -> None:
            name = self.config.container_name
            if not self.token:
                self._make_token(transcript)
            container = await asyncio.to_thread(find_container, client, name)
            if container is not None:
                container = await self._replace_stale(client, container, transcript)
            created = container is None
            if container is None:
                if not await asyncio.to_thread(has_image, client, self.config.runner_image):
                    cmd = f"docker image inspect {shlex.quote(self.config.runner_image)}"
                    transcript.add(cmd, 1, stderr="the runner image is not installed")
                    raise StepFailed("the runner image is not installed: run install first")
                socket = self.config.docker_socket
                if not os.path.exists(socket):
                    transcript.add(f"test -S {shlex.quote(socket)}", 1, stderr="no such file")
                    raise StepFailed(
                        f"the Docker socket {socket} does not exist; the Runner needs it: "
                        "set GITPILOT_MATRIXLAB_DOCKER_SOCKET to the engine's socket"
                    )
                cmd = run_command_line(self.config, self.url, self.jobs_dir, bool(self.token))
                container = await transcript.call(
                    cmd, self._run_container, client, describe=lambda c: str(c.id)
                )
            elif container.status == "running":
                transcript.add(f"docker start {shlex.quote(name)}", 0, "already running")
            else:
                await transcript.call(
                    f"docker start {shlex.quote(name)}", container.start, describe=lambda _: name
                )
            try:
                await self._wait_healthy(client, name, transcript)
            except StepFailed:
                await self._give_up(client, name, transcript, remove=created)
                raise
            await self._prune_jobs(transcript)

        return await self._act("start", body)

    def _make_token(self, transcript: Transcript) -> None:
        """Make a token and save it as ``matrixlab_token``: never start an open Runner."""
        cmd = "jupyter sandbox config --set matrixlab_token=***"
        if self.save_token is None:
            transcript.add(cmd, 1, stderr="no settings to save a token in")
            raise StepFailed(
                "no matrixlab_token is set and none can be saved here: set one, the Runner "
                "is never started without a token"
            )
        token = secrets.token_urlsafe(TOKEN_BYTES)
        try:
            self.save_token(token)
        except Exception as exc:  # SettingsNotSaved, or a store of another kind
            transcript.add(cmd, 1, stderr=str(exc))
            raise StepFailed(f"could not save a new matrixlab_token: {exc}") from exc
        self.token = token
        transcript.add(
            cmd, 0, "no matrixlab_token was set: made one and saved it (write-only, never shown)"
        )

    async def _replace_stale(self, client: Any, container: Any, transcript: Transcript) -> Any:
        """``container`` when it is as ``start`` would create it, else None once removed.

        A container started with another token, image or port would be reused by name:
        open to anyone (no token), refusing every run (another token) or out of date.
        """
        reasons = await asyncio.to_thread(self._stale, client, container)
        if not reasons:
            return container
        name = self.config.container_name
        cmd = f"docker rm -f {shlex.quote(name)}"
        if not is_managed(container):
            transcript.add(cmd, 1, stderr="; ".join(reasons))
            raise StepFailed(
                f"a container named {name} that gitpilot-jupyter did not create is in the way "
                f"({'; '.join(reasons)}): remove it, or set GITPILOT_MATRIXLAB_CONTAINER to "
                "another name"
            )
        await transcript.call(
            cmd,
            lambda: container.remove(force=True),
            describe=lambda _: f"replaced, as {'; '.join(reasons)}",
        )
        return None

    def _run_container(self, client: Any) -> Any:
        """``docker run -d ...`` (blocking); a container left in "created" is removed."""
        config, jobs = self.config, self.jobs_dir
        os.makedirs(jobs, exist_ok=True)
        volumes = {
            jobs: {"bind": jobs, "mode": "rw"},
            # The Runner only looks at /var/run/docker.sock inside, whatever the host path.
            config.docker_socket: {"bind": RUNNER_DOCKER_SOCKET, "mode": "rw"},
        }
        environment = runner_environment(jobs, self.token)
        try:
            return client.containers.run(
                config.runner_image,
                name=config.container_name,
                detach=True,
                ports={
                    f"{config.container_port}/tcp": (config.bind_address, config.port_for(self.url))
                },
                volumes=volumes,
                environment=environment,
                restart_policy={"Name": config.restart_policy},
                labels=dict([MANAGED_LABEL]),
            )
        except Exception:
            left = find_container(client, config.container_name)
            if left is not None and left.status == "created":
                left.remove(force=True)
            raise

    async def _wait_healthy(self, client: Any, name: str, transcript: Transcript) -> None:
        """Wait for ``/health`` (and the token) where the container was published.

        Gives up at once when the container exits or restarts (a crash loop), or
        when what answers refuses the token.
        """
        started = time.monotonic()
        url = self.config.published_url(self.url)
        backend = self._backend(url)
        deadline = started + self.config.start_wait_sec
        health = await backend.health()
        while not health["ok"] and time.monotonic() < deadline:
            if health.get("token") in ("rejected", "required") or health.get("run") is False:
                break  # up, but refusing our token or failing a snippet: waiting changes nothing
            container = await asyncio.to_thread(find_container, client, name)
            if container is None or _crashed(container):
                break
            await asyncio.sleep(_HEALTH_POLL_SEC)
            health = await backend.health()
        cmd = f"curl -fsS {shlex.quote(url + '/health')}"
        if health["ok"] or health.get("run") is False:
            transcript.add(cmd, 0, json.dumps(health["remote"]), ms=elapsed_ms(started))
            warnings = [] if health["ok"] else [f"the Runner is up, but {health['error']}"]
            if url.rstrip("/") != self.url:
                warnings.append(
                    f"the Runner answers at {url}, but matrixlab_url is {self.url}: "
                    f"set matrixlab_url to {url}"
                )
            self.warning = "; ".join(warnings) or None
            return
        logs = await asyncio.to_thread(container_logs, client, name)
        transcript.add(cmd, 1, logs, str(health["error"]), elapsed_ms(started))
        raise StepFailed(f"the Runner did not become healthy at {url}: {health['error']}")

    async def _give_up(
        self, client: Any, name: str, transcript: Transcript, *, remove: bool
    ) -> None:
        """Leave no container restarting: remove the one we created, stop one that was there."""
        container = await asyncio.to_thread(find_container, client, name)
        if container is None:
            return
        if remove:
            await transcript.call(
                f"docker rm -f {shlex.quote(name)}",
                lambda: container.remove(force=True),
                describe=lambda _: name,
            )
        else:
            await transcript.call(
                f"docker stop {shlex.quote(name)}",
                lambda: container.stop(timeout=10),
                describe=lambda _: name,
            )

    async def _prune_jobs(self, transcript: Transcript) -> None:
        """Remove the Runner's job folders and state copies older than
        :data:`JOBS_MAX_AGE_SEC` (root-owned ones in its container)."""
        started = time.monotonic()
        removed, failed = await asyncio.to_thread(
            prune_job_folders, self.jobs_dir, container=self.config.container_name
        )
        minutes = JOBS_MAX_AGE_SEC // 60
        jobs, state = shlex.quote(self.jobs_dir), shlex.quote(state_path(self.jobs_dir))
        cmd = (
            f"find {jobs} -maxdepth 1 -name 'job-*' -mmin +{minutes} -exec rm -rf {{}} + ; "
            f"find {state}/seeds {state}/runs {state}/uploads {state}/warm-runs -mindepth 1 "
            f"-maxdepth 1 -mmin +{minutes} -exec rm -rf {{}} +"
        )
        out = f"removed {removed} kept cop{'ies' if removed != 1 else 'y'} of old runs"
        transcript.add(cmd, 1 if failed else 0, out, "\n".join(failed), elapsed_ms(started))

    async def stop(self) -> dict[str, Any]:
        """Stop the Runner container (nothing to do when it is not running)."""

        async def body(client: Any, transcript: Transcript) -> None:
            name = self.config.container_name
            cmd = f"docker stop {shlex.quote(name)}"
            container = await asyncio.to_thread(find_container, client, name)
            if container is None:
                transcript.add(cmd, 0, f"no container named {name}: nothing to stop")
            elif container.status != "running":
                transcript.add(cmd, 0, f"{name} is not running ({container.status})")
            else:
                await transcript.call(
                    cmd, lambda: container.stop(timeout=10), describe=lambda _: name
                )
            await self._prune_jobs(transcript)

        return await self._act("stop", body)
