"""Batches: many snippets under one approval, run here or on a Dask cluster.

``BatchService`` is what faces call; ``run_batch`` is the Python API.
"""

from __future__ import annotations

from .api import arun_batch, as_items, run_batch
from .cluster import ClusterAccess
from .executors import DaskExecutor, LocalExecutor, default_workers, make_executor
from .items import BatchItem, items_from_list, load_folder, load_jsonl, load_source
from .output import ResultLog, read_results
from .plan import BatchPlan, BatchStore, manifest_digest, plan_batch
from .runner import BatchProgress, BatchRun
from .service import BatchService

__all__ = [
    "BatchItem",
    "BatchPlan",
    "BatchProgress",
    "BatchRun",
    "BatchService",
    "BatchStore",
    "ClusterAccess",
    "DaskExecutor",
    "LocalExecutor",
    "ResultLog",
    "arun_batch",
    "as_items",
    "default_workers",
    "items_from_list",
    "load_folder",
    "load_jsonl",
    "load_source",
    "make_executor",
    "manifest_digest",
    "plan_batch",
    "read_results",
    "run_batch",
]
