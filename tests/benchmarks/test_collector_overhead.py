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
    runs = json.loads(text)["runs"]  # torch's default thread count first, then 1 thread
    counts = [r["machine"]["torch_num_threads"] for r in runs]
    assert 1 in counts and len(counts) == len(set(counts))
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# gradwatch collector overhead at")
    assert md.count("# gradwatch collector overhead at") == len(runs)
    assert "nonfinite_from_norms" in md and "nonfinite_fused_l0" not in md
