"""The sandbox core: pure Python, async, no tornado / IPython / ipywidgets imports."""

from .errors import SandboxError
from .plans import ExecutionPlan
from .results import RunResult
from .service import SandboxService
from .settings import SandboxSettings, SettingsStore

__all__ = [
    "ExecutionPlan",
    "RunResult",
    "SandboxError",
    "SandboxService",
    "SandboxSettings",
    "SettingsStore",
]
