"""The row-checks benchmark runs end to end and checks its two paths against each other
(the figures come from the full run, committed under benchmarks/results/)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.benchmarks.quick import quick_run


def test_quick_run_times_both_paths_on_every_case(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    quick_run("row_checks.py", out)
    result = json.loads(out.read_text())
    assert len(result["results"]) == 8
    for case in result["results"].values():
        assert case["row_by_row_us_per_row"] > 0 and case["window_us_per_row"] > 0
        # a matrix that barely moves is no update-ratio finding since update-ratio flags
        # only updates larger than the weights: the healthy rows find nothing
        assert case["findings"] == 0
        # most rows of a healthy run go through the window path
        assert case["rows_one_by_one"] < case["rows"] / 2
    assert out.with_suffix(".md").read_text().startswith("# gradwatch row checks")
