"""The row-checks benchmark runs end to end and checks its two paths against each other
(the figures come from the full run, committed under benchmarks/results/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "row_checks.py"


def test_quick_run_times_both_paths_on_every_case(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert len(result["results"]) == 8
    for case in result["results"].values():
        assert case["row_by_row_us_per_row"] > 0 and case["window_us_per_row"] > 0
        # the healthy rows carry a standing update-ratio finding on every case
        assert case["findings"] >= 1
        # most rows of a healthy run go through the window path
        assert case["rows_one_by_one"] < case["rows"] / 2
    assert out.with_suffix(".md").read_text().startswith("# gradwatch row checks")
