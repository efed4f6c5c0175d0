"""The before/after report of the run page's loads (the browser run itself is the benchmark;
its figures are committed under benchmarks/results/)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import run_page_ab


def test_each_versions_first_two_loads_do_not_count() -> None:
    """The median and slowest leave out the first two loads; the p95 and median of all
    loads keep them (the cold first load is part of the goal)."""
    assert run_page_ab.summary([2400, 1900, 900, 1000, 1100]) == {
        "median_ms": 1000,
        "max_ms": 1100,
        "p95_all_ms": 2400,
        "median_all_ms": 1100,
    }
    assert run_page_ab.counted([1500, 900]) == [1500, 900]  # too few to drop any


def test_the_report_names_both_versions_and_the_network() -> None:
    times = {"before": [2000, 1500, 1000, 1020], "after": [1900, 1400, 950, 900]}
    report = {
        "command": "python benchmarks/run_page_ab.py --before /old/python --latency-ms 50",
        "date": "2026-12-05 07:30 UTC",
        "machine": "AMD EPYC, 2 cores",
        "steps": 100_000,
        "tensors": 300,
        "reps": 4,
        "latency_ms": 50.0,
        "before": "/old/python",
        "after": "/new/python",
        "summary": {name: run_page_ab.summary(t) for name, t in times.items()},
        "loads_ms": times,
    }
    md = run_page_ab.markdown(report)
    assert "every request 50 ms later (emulated)" in md
    assert "| before | 1,010 | 1,020 |" in md and "| after | 925 | 950 |" in md
    assert "Loads in order, after (ms): 1,900, 1,400, 950, 900" in md
