"""Sphinx configuration of the gitpilot-jupyter documentation (``make docs``).

Pages are Markdown (MyST). The references are generated at build time from their one source:
the configuration from the traits (autodoc-traits), the REST API from ``rest-api.yml``
(sphinxcontrib-openapi), the CLI from its argparse parser (sphinx-argparse) and the Python API
from the docstrings (autodoc). The build is offline: no intersphinx, nothing fetched.
"""

from __future__ import annotations

import importlib
import logging
import sys
import warnings
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(DOCS / "_ext"))

from typing import Any  # noqa: E402

from sphinx.application import Sphinx  # noqa: E402
from sphinx.util.nodes import make_refnode  # noqa: E402
from traitlets import TraitType  # noqa: E402

from gitpilot_jupyter._version import __version__  # noqa: E402

project = "gitpilot-jupyter"
author = "gitpilot-jupyter developers"
copyright = "gitpilot-jupyter developers"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "autodoc_traits",
    "sphinxcontrib.openapi",
    "sphinxarg.ext",
    "openapi_schemas",  # docs/_ext: components/schemas of rest-api.yml as tables
    "settings_table",  # docs/_ext: the fields of settings.json, from SandboxSettings
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "README.md", "**/.ipynb_checkpoints"]
templates_path: list[str] = []

# MyST: `#anchor` links to headings up to level 3; ``{directive}`` fences; definition lists.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist"]

# autodoc: members in source order, typed signatures, no import of optional extras at build time.
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_mock_imports = ["docker", "mcp"]

# Nitpicky (-n): every cross-reference must resolve, except into libraries we do not document
# here (no intersphinx, to stay offline).
_EXTERNAL_MODULES = (
    "httpx|tornado|traitlets|jupyter_server|jupyter_events|IPython|ipywidgets|asyncio|argparse|"
    "collections|typing|typing_extensions|pathlib|enum|datetime|subprocess|ssl|concurrent|mcp|docker"
)
_BARE_TYPING_NAMES = (
    "Path|Any|Callable|Awaitable|AsyncIterator|Iterator|Iterable|Mapping|Sequence|MutableMapping|"
    "TypeVar|Enum|Literal|Protocol|Self|NoneType|ModuleType|Namespace"
)
_BUILTINS = (
    "str|int|float|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|Exception|"
    "BaseException|RuntimeError|ValueError|TimeoutError|OSError"
)
nitpick_ignore_regex = [
    (r"py:.*", rf"({_EXTERNAL_MODULES})(\..*)?"),
    (r"py:class", r"t\..*"),  # traitlets' own annotations (``t.Any``)
    (r"py:class", f"({_BARE_TYPING_NAMES})"),
    (r"py:.*", f"({_BUILTINS})"),
]

html_theme = "pydata_sphinx_theme"
html_title = "gitpilot-jupyter"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}
html_show_sourcelink = False


# autodoc-traits warns about inherited traits without help (``ExtensionApp.default_url``) before
# ``_own_traits_only`` drops them from the page: not ours to fix, and not on the page.
warnings.filterwarnings("ignore", message="\\s*Documenting SandboxApp\\.", category=FutureWarning)


def _own_traits_only(
    app: Sphinx, what: str, name: str, obj: Any, skip: bool, options: Any
) -> bool | None:
    """Document a configurable's traits only where this project defines them.

    autodoc-traits lists inherited config traits too (``ExtensionApp.default_url``, ...): those
    belong to Jupyter Server's documentation, not ours.
    """
    if isinstance(obj, TraitType):
        owner = getattr(obj, "this_class", None)
        if owner is not None and not owner.__module__.startswith("gitpilot_jupyter."):
            return True
    return None


def _documented(env: Any, target: str) -> str | None:
    """The one documented Python object whose full name ends with ``target``, if exactly one."""
    objects = env.get_domain("py").objects
    if target in objects:
        return target
    matches = [full for full in objects if full.endswith("." + target)]
    return matches[0] if len(matches) == 1 else None


def _importable(dotted: str) -> bool:
    """Whether ``dotted`` is a module, or an attribute path inside one, that imports."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part, _MISSING)
            if obj is _MISSING:
                return False
        return True
    return False


def _exists_in_package(target: str, module: str) -> bool:
    """Whether ``target``, written relative to ``module`` or to one of its packages, is real."""
    parts = module.split(".") if module.startswith("gitpilot_jupyter") else ["gitpilot_jupyter"]
    return any(_importable(".".join([*parts[:cut], target])) for cut in range(len(parts), 0, -1))


_MISSING = object()


def _resolve_short_names(app: Sphinx, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve names the way docstrings write them (``PlanNotFound``, ``rest.RestClient``).

    A name that matches exactly one documented object links to it. A name that is real (it
    imports from the package) but not part of the documented API renders as plain text. Anything
    else stays a nitpicky warning: a docstring that names something that does not exist.
    """
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "").lstrip(".~")
    if not target:
        return None
    full = _documented(env, target)
    if full is not None:
        entry = env.get_domain("py").objects[full]
        return make_refnode(
            app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, full
        )
    if _importable(target) or _exists_in_package(target, node.get("py:module") or ""):
        return contnode
    return None


class _NoEmptyGlobWarning(logging.Filter):
    """Drop "toctree glob pattern '*' didn't match any documents".

    Each section's toctree names its pages in order and ends with ``*`` so that a page added later
    is listed without touching the index; while there is none, the glob is empty on purpose.
    (Sphinx 9.0 logs this warning without a type, so ``suppress_warnings`` cannot reach it.)
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return getattr(record, "subtype", None) != "empty_glob"


def _install_filters(app: Sphinx) -> None:
    # First in line: Sphinx's own filters count a warning (and fail -W) as they let it pass.
    for handler in logging.getLogger("sphinx").handlers:
        handler.filters.insert(0, _NoEmptyGlobWarning())


def setup(app: Sphinx) -> None:
    app.connect("autodoc-skip-member", _own_traits_only)
    app.connect("missing-reference", _resolve_short_names)
    app.connect("builder-inited", _install_filters)
