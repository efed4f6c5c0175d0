"""The collector overhead benchmark runs end to end (a smoke run; the figures themselves
come from the full run, committed under benchmarks/results/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "collector_overhead.py"


def test_quick_run_writes_results_for_every_model(tmp_path: Path) -> None:
    out = tmp_path / "overhead.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    assert {"mlp", "cnn", "transformer"} <= set(text.split('"'))
    json.loads(text)
    assert out.with_suffix(".md").read_text().startswith("# gradwatch collector overhead")
