"""Write the results: ``benchmarks/results/latest.json`` and ``latest.md`` (the README's table)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import Measure

RESULTS = Path(__file__).resolve().parent / "results"


def _verdict(measure: Measure) -> str:
    if measure.ok is None:
        return ""
    return "met" if measure.ok else "**missed**"


def markdown(measures: list[Measure], meta: dict[str, Any]) -> str:
    """The results as one Markdown table, with the machine they ran on."""
    lines = [
        f"Measured {meta['finished']} on {meta['cpu']} ({meta['cores']} cores, "
        f"{meta['memory_gb']} GB, Linux {meta['kernel']}, Python {meta['python']}); "
        f"load average before {meta['loadavg_before']}, after {meta['loadavg_after']}"
        + (" (quick run: few iterations)" if meta.get("quick") else "")
        + ".",
        "",
        "| benchmark | measure | value | target | verdict | note |",
        "|---|---|---|---|---|---|",
    ]
    for m in measures:
        value = f"{m.value:g} {m.unit}".strip()
        note = m.note.replace("|", "\\|")
        lines.append(f"| {m.bench} | {m.name} | {value} | {m.target} | {_verdict(m)} | {note} |")
    return "\n".join(lines) + "\n"


def write(measures: list[Measure], meta: dict[str, Any], folder: Path = RESULTS) -> Path:
    """Write JSON and Markdown side by side; return the Markdown file."""
    folder.mkdir(parents=True, exist_ok=True)
    document = {"machine": meta, "results": [m.to_dict() for m in measures]}
    (folder / "latest.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    table = folder / "latest.md"
    table.write_text(markdown(measures, meta), encoding="utf-8")
    return table
