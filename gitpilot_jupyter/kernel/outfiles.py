"""What a ``%%sandbox`` cell does with the files its run left under ``out/``.

Each is saved into the cell's output folder (``--output-dir``, by default
``sandbox-out/<run_id>/`` in the kernel's folder, beside the notebook) by the core's
writer (:mod:`gitpilot_jupyter.sandbox.rich.saving`): never outside it, never over a
file without ``--force``. A line names where each went; an image among them (PNG,
JPEG, GIF, SVG) is shown in the cell too, made safe as any display output is
(:func:`gitpilot_jupyter.sandbox.rich.for_trusted_view`: an SVG as an ``<img>``).
"""

from __future__ import annotations

import base64
import os
from pathlib import PurePosixPath

from ..client.base import SandboxClient
from ..sandbox import rich
from ..sandbox.errors import SandboxError
from ..sandbox.results import RunResult
from ..sandbox.rich import DisplayCaps
from ..sandbox.rich.saving import IMAGE_SUFFIXES, OutputFolder, SaveRefused, default_output_dir
from ..sandbox.sync import run_sync
from .display import publish_display_data

#: An image file's MIME type by its suffix (``.jpeg`` as well as ``.jpg``).
_IMAGE_TYPES = {suffix: mime for mime, suffix in IMAGE_SUFFIXES.items()} | {".jpeg": "image/jpeg"}


def save_run_files(
    client: SandboxClient,
    result: RunResult,
    output_dir: str | os.PathLike[str] | None,
    *,
    force: bool = False,
    caps: DisplayCaps | None = None,
) -> list[str]:
    """Save ``result.files`` (printing where each went, showing the images); the
    sentences of those not saved, or saved and not shown.

    The images shown count against the run's display caps (``caps``, the plan's; what
    the run displayed itself counts first): one past them is saved, not shown.
    """
    folder = OutputFolder(output_dir or default_output_dir(result.run_id), force=force)
    inline = rich.InlineImages.after(caps or DisplayCaps(), result.outputs)
    refused = []
    for entry in result.files:
        name = entry["name"]
        try:
            data = run_sync(client.run_file(result.run_id, name))
            path = folder.write(name, data)
        except SaveRefused as exc:
            refused.append(exc.message)
            continue
        except SandboxError as exc:  # expired, or the server went away meanwhile
            refused.append(f"out/{name} not saved: {exc.message}")
            continue
        print(f"[file out/{name}: {path}]")
        mime = _IMAGE_TYPES.get(PurePosixPath(name).suffix.lower())
        if mime is None:
            continue
        over = inline.take(len(data), base64_encoded=mime != "image/svg+xml")
        if over is not None:
            refused.append(f"out/{name} saved, not shown: {over}")
            continue
        _show_image(mime, data)
    return refused


def _show_image(mime: str, data: bytes) -> None:
    value = data.decode("utf-8", "replace") if mime == "image/svg+xml" else base64.b64encode(data)
    text = value if isinstance(value, str) else value.decode("ascii")
    item = {"output_type": "display_data", "data": {mime: text}, "metadata": {}}
    safe = rich.for_trusted_view(item)
    publish_display_data(data=safe["data"], metadata=safe.get("metadata") or {})
