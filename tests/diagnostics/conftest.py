"""Fixtures for the diagnostics tests: the Runner stand-in."""

from __future__ import annotations

from tests.support.standin_fixture import runner_standin, start_standin

__all__ = ["runner_standin", "start_standin"]
