"""The shipped OpenAPI document: valid, complete, and in step with the core it describes."""

from __future__ import annotations

import dataclasses
import inspect
import re
import time
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from gitpilot_jupyter.sandbox.plans import SOURCES, ExecutionPlan
from gitpilot_jupyter.sandbox.request import Caller, RunOptions
from gitpilot_jupyter.sandbox.service import SandboxService
from gitpilot_jupyter.sandbox.settings import FIELD_NAMES
from gitpilot_jupyter.server import schemas
from gitpilot_jupyter.server.schemas import openapi_document

SCHEMAS = openapi_document()["components"]["schemas"]


def test_document_is_valid_openapi() -> None:
    validate(openapi_document())


def mounted_routes(app: Any) -> set[str]:
    """The API paths the extension mounts, with regex groups written as the document does."""
    routes = set()
    for raw, *_ in app.handlers:
        pattern = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", raw)  # (?P<run_id>...) -> {run_id}
        alternatives = re.fullmatch(r"(.*)\((.+)\)", pattern)
        if alternatives:
            routes |= {alternatives[1] + name for name in alternatives[2].split("|")}
        else:
            routes.add(pattern)
    return routes


def test_every_mounted_route_is_documented_and_nothing_more(jp_serverapp: Any) -> None:
    app = jp_serverapp.extension_manager.extension_apps["gitpilot_jupyter"]
    (sandbox_app,) = app
    assert mounted_routes(sandbox_app) == set(openapi_document()["paths"])


def test_request_schemas_match_what_the_service_accepts() -> None:
    # A documented field the service does not take would be dropped, not a feature: every
    # run option of a body is a field of RunOptions; the others are the caller's (session),
    # the token, the run's id or the caller's yes (``confirm``: plan_and_run's ``confirmed``).
    # ``filename``: the name an in-process caller's file runs under (the CLI reads the file
    # itself); over REST a file run names its ``file``, under the server's root.
    options = {f.name for f in dataclasses.fields(RunOptions)} - {"filename"}
    assert {f.name for f in dataclasses.fields(Caller)} == {"user", "session_id"}
    assert set(SCHEMAS["PlanRequest"]["properties"]) == options | {"session_id"}
    run = set(inspect.signature(SandboxService.run).parameters)
    assert {"approval_token", "run_id", "expected"} <= run
    long_form = options - {"file", "source"}  # a long-form run is a snippet, as planned
    assert set(SCHEMAS["RunRequest"]["properties"]) == long_form | {
        "session_id",
        "approval_token",
        "run_id",
    }
    assert SCHEMAS["PlanRequest"]["properties"]["source"]["enum"] == list(SOURCES)
    both = set(inspect.signature(SandboxService.plan_and_run).parameters)
    assert {"confirmed", "run_id"} <= both
    assert set(SCHEMAS["PlanAndRunRequest"]["properties"]) == (options - {"file"}) | {
        "session_id",
        "confirm",
        "run_id",
    }
    assert SCHEMAS["PlanAndRunRequest"]["properties"]["source"]["enum"] == list(SOURCES)


def test_settings_schemas_match_the_settings() -> None:
    # ``confirm`` is the user's yes to switching to off (configure's argument), no setting.
    assert set(SCHEMAS["SettingsUpdate"]["properties"]) == set(FIELD_NAMES) | {"confirm"}
    assert "confirm" in inspect.signature(SandboxService.configure).parameters
    shown = set(SCHEMAS["Settings"]["properties"])
    assert shown == set(FIELD_NAMES) - {"matrixlab_token"} | {"has_token"}


def test_the_server_prepares_every_request_body_schema_when_it_starts(jp_serverapp: Any) -> None:
    """Each body a handler reads has its validator made before the first request."""
    server = Path(schemas.__file__).parent
    read = {
        name
        for path in server.glob("*.py")
        for name in re.findall(r"self\.body\(\"(\w+)\"\)", path.read_text(encoding="utf-8"))
    }
    assert read and read <= set(SCHEMAS)
    deadline = time.monotonic() + 30  # the start-up thread on a loaded machine
    while time.monotonic() < deadline and schemas._validator.cache_info().currsize < len(SCHEMAS):
        time.sleep(0.05)
    assert schemas._validator.cache_info().currsize == len(SCHEMAS)


def test_the_plan_schema_is_the_plan_object_and_names_its_session() -> None:
    """Every field a plan sends is documented (and each required one sent); a session
    cell's plan names its session, a single run's says null, and both come back whole."""
    schema = {"$ref": "#/components/schemas/Plan", "components": openapi_document()["components"]}
    planner = SandboxService().planner
    for session in ("nb-1", None):
        plan = planner.describe(RunOptions(language="python", code="x = 1", session=session))
        shown = plan.to_dict()
        Draft202012Validator(schema).validate(shown)
        assert set(shown) == set(SCHEMAS["Plan"]["properties"])
        assert set(SCHEMAS["Plan"]["required"]) <= set(shown)
        assert shown["session"] == session
        again = ExecutionPlan.from_dict(shown)
        assert again.spec.session == session and again.spec.digest == plan.digest
    assert plan.goal == "Run a python snippet (1 line)"
    cell = planner.describe(RunOptions(language="python", code="x = 1\ny = 2", session="nb-1"))
    assert cell.goal == "Run a python cell (2 lines) in session nb-1"
