"""Fixtures of the batch tests: a Dask cluster of processes, and the server and kernel ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# The magic tests: an IPython shell, and a real ipykernel.
from tests.kernel.conftest import shell, venv_kernelspec  # noqa: F401
from tests.kernel.test_in_kernel import kernel  # noqa: F401

# The REST tests use the server tests' fixtures: a real server held to rest-api.yml.
from tests.server.conftest import api, jp_server_config, openapi  # noqa: F401
from tests.support.dask_cluster import DaskProcesses, dask_processes


@pytest.fixture
def dask_cluster(tmp_path: Path) -> Iterator[DaskProcesses]:
    """``dask scheduler`` and two ``dask worker`` processes (w1, w2), 2 threads each."""
    with dask_processes(tmp_path) as cluster:
        yield cluster
