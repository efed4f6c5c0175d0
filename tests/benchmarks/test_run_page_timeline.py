"""The run-page timeline's phases from a page's marks (the browser run itself is the
benchmark; its figures are committed under benchmarks/results/)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import run_page_timeline


def test_phases_sum_each_graphs_drawings_and_time_the_reply() -> None:
    marks = [
        ["dom", "", 300.0, 0],
        ["plotly", "", 305.0, 0],
        ["draw", "run-loss-graph", 420.0, 70.0],
        ["draw", "run-heatmap-graph", 490.0, 100.0],
        ["draw", "run-loss-graph", 900.0, 5.0],  # a redraw adds to its graph
    ]
    got = run_page_timeline.phases(
        marks, 400.0, 750.0, {"TaskDuration": 0.6, "ScriptDuration": 0.2}
    )
    assert got["DOMContentLoaded"] == 300.0 and got["Plotly defined"] == 305.0
    assert got["draw run-loss-graph"] == 75.0
    assert got["draw run-heatmap-graph"] == 100.0
    assert got["drawing, all graphs (sync)"] == 175.0
    assert got["figures' reply arrived"] == 400.0
    assert got["reply to first drawing"] == 20.0
    assert got["renderer main thread busy"] == pytest.approx(600.0)
    assert got["of which script"] == pytest.approx(200.0)
    assert got["page drawn (READY)"] == 750.0


def test_phases_without_a_reply_or_drawing_leave_those_rows_out() -> None:
    got = run_page_timeline.phases([], None, 80.0, {})
    assert "figures' reply arrived" not in got and "reply to first drawing" not in got
    assert got["drawing, all graphs (sync)"] == 0.0
    assert got["page drawn (READY)"] == 80.0
