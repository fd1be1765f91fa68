"""Removals after a run's answer, also when the interpreter is already shutting down."""

from __future__ import annotations

import concurrent.futures.thread
import threading

import pytest

from gitpilot_jupyter.sandbox.local.cleanup import AfterRuns


def test_removals_run_in_a_worker_thread() -> None:
    after = AfterRuns()
    threads: list[str] = []
    after.submit(lambda: threads.append(threading.current_thread().name))
    after.wait(timeout=10)
    assert len(threads) == 1 and threads[0].startswith("gitpilot-after-runs")


@pytest.mark.parametrize("started", [True, False], ids=["worker-started", "no-worker-yet"])
def test_once_the_interpreter_shuts_down_a_removal_is_done_at_once(
    monkeypatch: pytest.MonkeyPatch, started: bool
) -> None:
    # A run stopped by Ctrl-C ends after the interpreter began to shut down, and the
    # thread pool then refuses new work ("cannot schedule new futures after interpreter
    # shutdown"): the removal must still happen, not raise in the event loop.
    after = AfterRuns()
    if started:
        after.submit(lambda: None)
        after.wait(timeout=10)
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)
    threads: list[str] = []
    after.submit(lambda: threads.append(threading.current_thread().name))
    assert threads == [threading.current_thread().name]
    after.wait(timeout=10)


def test_a_failing_removal_at_shutdown_is_logged_not_raised(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(concurrent.futures.thread, "_shutdown", True)

    def broken() -> None:
        raise OSError("the cgroup is busy")

    AfterRuns().submit(broken)
    assert "cleaning up after a run failed" in caplog.text and "the cgroup is busy" in caplog.text
