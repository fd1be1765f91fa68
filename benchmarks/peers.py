"""Benchmark 6, peers: the same hello-world through llm-sandbox, epicbox and this project.

All on the local Docker engine and one locally built image (Docker Hub is not
reachable here): ``gitpilot-bench/python``, the test image plus a ``python``
link that llm-sandbox needs. This project is measured in-process (the core, as
the peers are libraries): its matrixlab path against the Runner stand-in in a
container, and its isolated subprocess path. A raw ``docker run`` gives the
price of one fresh container per snippet, which the real Runner pays and the
stand-in (one long-lived container running snippets as processes) does not.
"""

from __future__ import annotations

import asyncio
import io
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from tests.support.live_server import free_port

from .common import Context, Measure, median

BENCH = "peers"
BASE_IMAGE = "gitpilot-test/bookworm-python:latest"
IMAGE = "gitpilot-bench/python:latest"
STANDIN_IMAGE = "gitpilot-test/matrixlab-runner-standin:latest"
CODE = "print(2+2)"
DOCKERFILE = f"FROM {BASE_IMAGE}\nRUN ln -sf /usr/bin/python3 /usr/local/bin/python\n"


def _docker() -> Any:
    import docker

    client = docker.from_env()  # type: ignore[attr-defined]
    client.ping()
    return client


def _ensure_image(client: Any) -> None:
    client.images.get(BASE_IMAGE)  # built by scripts/build-test-images.sh
    client.images.build(fileobj=io.BytesIO(DOCKERFILE.encode()), tag=IMAGE, rm=True)


#: The pause before each measured call, for every path alike: a person's or an agent's
#: pace (an agent's next snippet waits for a model's answer), longer than the ~40 ms a
#: used slot's replacement takes to start here. Back to back, a single-use sandbox's
#: run shares the two cores with the previous run's refill: that is throughput, shown
#: in its own row.
PACE_SEC = 0.1


def _median_of(fn: Callable[[], str], runs: int, pace: float = PACE_SEC) -> float:
    fn()  # warm up
    times = []
    for _ in range(runs):
        time.sleep(pace)
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
        if out.strip() != "4":
            raise RuntimeError(f"unexpected output {out!r}")
    return median(times)


def _epicbox() -> Callable[[], str]:
    import epicbox  # type: ignore[import-untyped]
    import epicbox.utils  # type: ignore[import-untyped]
    from urllib3.util.retry import Retry

    class CompatRetry(Retry):
        """epicbox 1.1.0 passes urllib3 1.x's ``method_whitelist`` (``allowed_methods`` in 2.x)."""

        def __init__(self, *args: Any, method_whitelist: Any = None, **kwargs: Any) -> None:
            if method_whitelist is not None:
                kwargs["allowed_methods"] = method_whitelist
            super().__init__(*args, **kwargs)

    epicbox.utils.Retry = CompatRetry
    epicbox.configure(profiles=[epicbox.Profile("python", IMAGE)])

    def once() -> str:
        result = epicbox.run(
            "python",
            "python3 main.py",
            files=[{"name": "main.py", "content": CODE.encode()}],
            limits={"cputime": 5, "memory": 128},
        )
        return str(result["stdout"].decode())

    return once


def _llm_sandbox_session() -> tuple[Any, Callable[[], str]]:
    from llm_sandbox import SandboxSession  # type: ignore[import-untyped]

    # The image has no venv module: llm-sandbox's environment setup would fail.
    session = SandboxSession(
        lang="python", image=IMAGE, keep_template=True, skip_environment_setup=True, verbose=False
    )
    return session, lambda: str(session.run(CODE).stdout)


def _llm_sandbox_whole(runs: int) -> float:
    """Open, run, close: what a one-off snippet costs (one run: close waits ~10 s)."""
    session, once = _llm_sandbox_session()
    started = time.perf_counter()
    session.open()
    try:
        once()
    finally:
        session.close()
    return time.perf_counter() - started


def _service_path(backend: str, url: str = "", token: str = "") -> Callable[[], str]:
    from gitpilot_jupyter.sandbox.local.pool import PoolConfig
    from gitpilot_jupyter.sandbox.request import RunOptions
    from gitpilot_jupyter.sandbox.service import SandboxService
    from gitpilot_jupyter.sandbox.settings import SettingsStore

    folder = os.path.join(os.environ.get("TMPDIR", "/tmp"), "bench-peers-" + secrets.token_hex(4))
    env = {"GITPILOT_MATRIXLAB_URL": url, "GITPILOT_MATRIXLAB_TOKEN": token} if url else {}
    # The subprocess path with its warm pool, python slots' interpreter started ahead.
    pool = PoolConfig(prestart=True)
    service = SandboxService(settings=SettingsStore(folder, environ=env), pool=pool)
    loop = asyncio.new_event_loop()

    def once() -> str:
        options = RunOptions(language="python", code=CODE, backend=backend)
        planned = loop.run_until_complete(service.plan_and_run(options, confirmed=True))
        assert planned.result is not None
        return planned.result.stdout

    return once


def _docker_run(client: Any) -> Callable[[], str]:
    def once() -> str:
        out: bytes = client.containers.run(
            IMAGE, ["python3", "-c", CODE], remove=True, network_disabled=True
        )
        return out.decode()

    return once


def _bare() -> str:
    return subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, check=True
    ).stdout


def run(ctx: Context) -> list[Measure]:
    """Medians of each path, and their ratio to this project's isolated subprocess path."""
    try:
        client = _docker()
        _ensure_image(client)
    except Exception as exc:  # no engine, no base image: say so instead of failing the run
        return [Measure(BENCH, "peers", 0, "", note=f"skipped: Docker not usable here ({exc})")]
    runs = ctx.n(20)
    token = secrets.token_urlsafe(16)
    port = free_port()
    standin = client.containers.run(
        STANDIN_IMAGE,
        detach=True,
        remove=True,
        ports={"8000/tcp": ("127.0.0.1", port)},
        environment={"MATRIXLAB_BEARER_TOKEN": token},
        # Its start-up check, as the real Runner's: the engine's socket is mounted in.
        volumes={"/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}},
    )
    timings: dict[str, tuple[float, str]] = {}
    try:
        _wait_for_standin(port)
        ours_path = _service_path("subprocess")
        ours = _median_of(ours_path, runs)
        timings["gitpilot subprocess (core in-process, warm pool)"] = (
            ours,
            "full containment (bwrap chain, seccomp, cgroup memory/pids), a warm slot "
            f"(interpreter started ahead); {PACE_SEC * 1000:.0f} ms between calls, as every path",
        )
        timings["gitpilot subprocess, back to back"] = (
            _median_of(ours_path, runs, pace=0.0),
            "no pause between calls: each run shares the cores with the previous one's refill",
        )
        timings["gitpilot matrixlab -> Runner stand-in in Docker"] = (
            _median_of(_service_path("matrixlab", f"http://127.0.0.1:{port}", token), runs),
            "HTTP to a container running snippets as processes (no container per snippet)",
        )
        timings["epicbox 1.1.0 (container per snippet)"] = (
            _median_of(_epicbox(), runs),
            "fresh container, no network, cpu/memory ulimits",
        )
        session, once = _llm_sandbox_session()
        session.open()
        try:
            timings["llm-sandbox 0.3.46 (run in an open session)"] = (
                _median_of(once, runs),
                "docker exec in one long-lived container (shared between snippets)",
            )
        finally:
            session.close()
        timings["llm-sandbox 0.3.46 (open + run + close)"] = (
            _llm_sandbox_whole(1),
            "one-off: container create, exec, stop (10 s stop timeout: PID 1 ignores SIGTERM)",
        )
        timings["docker run --network none (reference)"] = (
            _median_of(_docker_run(client), runs),
            "what one fresh container per snippet costs on this engine",
        )
        timings["bare python spawn (reference)"] = (_median_of(_bare, runs), "no isolation")
    finally:
        standin.kill()
    session_seconds = timings["llm-sandbox 0.3.46 (run in an open session)"][0]
    return [
        Measure(
            BENCH,
            name,
            round(seconds * 1000, 1),
            "ms",
            note=f"{seconds / ours:.2f}x gitpilot subprocess; {isolation}",
        )
        for name, (seconds, isolation) in timings.items()
    ] + [
        Measure(
            BENCH,
            "llm-sandbox (reused session) / gitpilot subprocess (warm)",
            round(session_seconds / ours, 1),
            "x slower",
            target=">= 20x",
            ok=session_seconds >= 20 * ours,
            note="same run, same snippet; theirs shares one container between snippets",
        )
    ]


def _wait_for_standin(port: int) -> None:
    import httpx

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the Runner stand-in container did not answer")
