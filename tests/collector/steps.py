"""Per-step dicts of a spooled run, for assertions (built on
:mod:`gradwatch.core.local_reader`)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from gradwatch.core.local_reader import load_run


def steps(run_dir: Path, optimizer: int = 0) -> list[dict[str, Any]]:
    """One dict per collected step of ``optimizer`` (fields of ``reader.StepRow``)."""
    run = load_run(run_dir)
    assert run.torn_tail_bytes == 0 and run.corrupt_frames == 0
    out = []
    for row in run.steps.get(optimizer, []):
        d = asdict(row)
        d["has_loss"] = row.loss is not None
        d["events"] = [tuple(e) for e in row.events]
        out.append(d)
    return out
