"""The collector overhead benchmark runs end to end (a smoke run; the figures themselves
come from the full run, committed under benchmarks/results/)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks.quick import quick_run


def test_quick_run_writes_results_for_every_model(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    quick_run("collector_overhead.py", out)
    text = out.read_text()
    assert {"mlp", "cnn", "transformer"} <= set(text.split('"'))
    json.loads(text)
    assert out.with_suffix(".md").read_text().startswith("# gradwatch collector overhead")
