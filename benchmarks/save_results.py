"""How a benchmark leaves its results: ``benchmarks/results/<name>.json`` with the
measurements and ``<name>.md`` (the table for people) next to it; the table is printed too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def save(out: Path, result: dict[str, Any], markdown: str, *, indent: int = 2) -> None:
    """Write ``result`` as JSON to ``out`` and ``markdown`` to ``out`` with suffix ``.md``,
    then print ``markdown``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=indent) + "\n")
    out.with_suffix(".md").write_text(markdown)
    print(markdown)


def row(*cells: object) -> str:
    """One row of a markdown table: ``| a | b | c |``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"
