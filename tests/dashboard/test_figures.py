"""Figure builders and explanations as plain functions: values, NaN/±Inf marks, empty states."""

from __future__ import annotations

import base64
import math

import numpy as np
import plotly.graph_objects as go
import pytest

from gradwatch_dashboard import compare_figures as cf
from gradwatch_dashboard import figures
from gradwatch_dashboard.components import flatten
from gradwatch_dashboard.dash_app import CARTESIAN_TRACES
from gradwatch_dashboard.explain import explain, first_nonfinite, lifecycle_anomalies
from gradwatch_dashboard.pages.run import as_grid, bad_counts
from gradwatch_dashboard.values import floats, fmt, grid

NAN, INF = math.nan, math.inf


def names(fig: go.Figure) -> list[str]:
    return [t.name for t in fig.data]


def annotations(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def test_api_values_decode_to_floats() -> None:
    got = floats([1, "NaN", "Infinity", "-Infinity", None, 2.5])
    assert got[0] == 1.0 and math.isnan(got[1]) and got[2:4] == [INF, -INF]
    assert math.isnan(got[4]) and got[5] == 2.5
    assert [fmt(v) for v in (NAN, INF, -INF, 0.123456)] == [
        "NaN",
        "Infinity",
        "-Infinity",
        "0.1235",
    ]


@pytest.mark.parametrize(("value", "label"), [(NAN, "NaN"), (INF, "+Inf"), (-INF, "−Inf")])
def test_heatmap_leaves_nonfinite_cells_blank_and_marks_them(value: float, label: str) -> None:
    fig = figures.tensor_heatmap(["a", "b"], [1, 65], [[0.01, 10.0], [value, 1.0]], title="g")
    heat = fig.data[0]
    z = heat.z.tolist()  # log10; the bad cell is a gap (NaN)
    assert z[0] == [-2.0, 1.0] and math.isnan(z[1][0]) and z[1][1] == 0.0
    marks = [t for t in fig.data[1:] if t.name == label]
    assert len(marks) == 1 and list(marks[0].x) == [1] and list(marks[0].y) == ["b"]


def test_loss_figure_marks_nonfinite_losses_and_draws_long_lines_with_the_pages_bundle() -> None:
    n = 30_000  # more than any page asks for: still a trace of the cartesian bundle (SVG)
    steps = list(range(1, n + 1))
    values = [1.0] * n
    values[10], values[20] = NAN, INF
    fig = figures.loss_figure((steps, values), [("lr", [1, 2], [0.1, 0.1])], focus=7)
    assert {t.type for t in fig.data} <= CARTESIAN_TRACES
    assert type(fig.data[0]) is go.Scatter and len(fig.data[0].x) == n
    assert math.isnan(fig.data[0].y[10])  # a gap in the line
    nan_marks = next(t for t in fig.data if t.name == "NaN")
    assert list(nan_marks.x) == [11]
    assert "step 7" in annotations(fig)


@pytest.mark.parametrize(
    "fig",
    [
        figures.loss_figure(None, []),
        figures.loss_figure(([], []), []),
        figures.tensor_heatmap([], [], [], title="g"),
        figures.nonfinite_figure([], [], [], first=None),
        figures.lifecycle_figure([], {}),
        cf.overlay([], []),
        cf.loss_difference(("a", [], []), [("b", [], [])]),
    ],
)
def test_empty_states_say_why(fig: go.Figure) -> None:
    assert not fig.data
    assert annotations(fig) and all(annotations(fig))


def test_ratio_carries_nonfinite_and_zero_updates() -> None:
    got = figures.ratio([[1.0, 0.0, NAN, 1.0]], [[10.0, 0.0, 1.0, 0.0]]).tolist()
    assert got[0][:2] == [0.1, 0.0] and math.isnan(got[0][2]) and got[0][3] == INF


def test_nonfinite_timeline_calls_out_the_first_bad_step() -> None:
    fig = figures.nonfinite_figure([1, 65], [0, 3], [70], first=(66, "0.weight"))
    assert "first non-finite: step 66, 0.weight" in annotations(fig)
    clean = figures.nonfinite_figure([1, 65], [0, 0], [], first=None)
    # nothing to chart: a sentence, not an empty 0-1 "tensors" axis
    assert annotations(clean) == ["No NaN or Inf in any loss or gradient."] and not clean.data
    assert clean.layout.yaxis.visible is False


def test_lifecycle_lanes_and_anomalies() -> None:
    rows = [
        {"step": 1, "events": [["zero_grad", 0.0, ""], ["backward", 0.1, ""], ["step", 0.2, ""]]},
        {"step": 2, "events": [["backward", 0.1, ""], ["step", 0.2, ""]]},
    ]
    fig = figures.lifecycle_figure(
        rows, lifecycle_anomalies([{"check": "stale-grad", "step": 2, "severity": "error"}])
    )
    lanes = {t.name: list(t.x) for t in fig.data}
    # step N's events sit around N, in order: step 1's three at 1 − ⅓ + ⅔·(1, 2, 3)/4
    assert lanes["zero_grad"] == pytest.approx([1 - 1 / 3 + 2 / 3 / 4])
    assert lanes["backward"] == pytest.approx([1, 2 - 1 / 3 + 2 / 3 / 3])
    assert all(abs(x - round(x)) < 0.5 for xs in lanes.values() for x in xs)
    assert lanes["finding"] == [2]  # at the step it concerns
    # an empty lane is said in words, and named in the legend
    assert "grad_modified: none" in lanes
    words = [a.text for a in fig.layout.annotations]
    assert "no gradient edited between backward and step" in words
    stale = figures.lifecycle_figure([{"step": 2, "events": [["backward", 0.1, ""]]}], {})
    assert any("evidence of stale gradients" in a.text for a in stale.layout.annotations)


def test_first_nonfinite_prefers_findings_then_data() -> None:
    findings = [
        {"check": "nonfinite-loss", "step": 9, "param": None, "severity": "error"},
        {"check": "nonfinite-grad", "step": 9, "param": "0.weight", "severity": "error"},
    ]
    assert first_nonfinite(findings, None, None) == (9, "0.weight")
    overview = {"tensors": ["a", "b"], "steps": [1, 65], "values": [[0, 0], [0, "NaN"]]}
    assert first_nonfinite([], overview, ([1, 2, 70], [1.0, 1.0, NAN])) == (65, "b")
    assert first_nonfinite([], overview, ([1, 2], [1.0, INF])) == (2, None)
    assert first_nonfinite([], None, None) is None


def test_explain_says_one_sentence_per_incident_in_step_order() -> None:
    findings = [
        {"check": "loss-diverging", "severity": "warning", "step": 1, "message": "m1"},
        {"check": "stale-grad", "severity": "error", "step": 2, "message": "m2"},
        {"check": "loss-diverging", "severity": "warning", "step": 3, "message": "m3."},
        {"check": "loss-diverging", "severity": "warning", "step": 9, "message": "m4"},
    ]
    assert explain(findings, (4, "w")) == [  # in the order it happened
        "loss-diverging at step 1: m1.",
        "stale-grad at step 2: m2; then loss-diverging at steps 3–9 (2 findings).",
        "First NaN/Inf at step 4 in w.",
    ]
    assert explain([], None) == ["No problems found: every integrity check stayed quiet."]


def test_explain_keeps_the_worst_checks_when_there_are_too_many() -> None:
    infos = [{"check": f"i{k}", "severity": "info", "step": k, "message": "x"} for k in range(9)]
    error = {"check": "stale-grad", "severity": "error", "step": 50, "message": "m"}
    lines = explain([*infos, error], None)
    assert len(lines) == 6 and lines[-1] == "stale-grad at step 50: m."
    assert lines[:5] == [f"i{k} at step {k}: x." for k in range(5)]


def test_full_resolution_series_become_a_grid() -> None:
    series = [
        {"name": "a", "steps": [1, 2], "values": [1, "NaN"]},
        {"name": "b", "steps": [1, 2], "values": [2, 3]},
    ]
    got = as_grid(series)
    assert (got["tensors"], got["steps"]) == (["a", "b"], [1, 2])
    np.testing.assert_array_equal(got["values"], [[1.0, NAN], [2.0, 3.0]])
    empty = as_grid([])
    assert (empty["tensors"], empty["steps"], empty["values"].shape) == ([], [], (0, 0))


def test_grids_from_json_rows_and_typed_arrays_keep_nonfinite_values() -> None:
    rows = [[1, "NaN", "Infinity"], [2, "-Infinity", None]]
    want = np.array([[1.0, NAN, INF], [2.0, -INF, NAN]])
    np.testing.assert_array_equal(grid(rows), want)
    for kind in ("<f4", "<f8"):
        raw = base64.b64encode(want.astype(kind).tobytes()).decode()
        typed = {"dtype": kind[1:], "shape": [2, 3], "bdata": raw}
        np.testing.assert_array_equal(grid(typed), want)
    # unknown text is NaN (as ``floats`` reads it), ragged rows are padded with NaN
    np.testing.assert_array_equal(grid([[1, "what"], [2]]), [[1.0, NAN], [2.0, NAN]])
    assert grid([]).shape == (0, 0)


def test_nonfinite_counts_per_column() -> None:
    cells = [[0, 0, 1, "NaN"], [0, 0, 0, 2], [0, "Infinity", 0, 0]]
    assert bad_counts(grid(cells), 4) == [0, 1, 1, 2]
    assert bad_counts(grid([]), 2) == [0, 0]


# The compare page, against the drift API's documented JSON shapes (issue 5's contract).
COMPARISON = {
    "a": "A",
    "b": "B",
    "verdict": "diverged",
    "step": 31,
    "metric": "loss",
    "param": None,
    "cause": "data-order",
    "message": "batch checksums differ from step 31.",
    "exact": True,
    "steps_compared": 90,
    "fingerprint_diff": [{"field": "config.seed", "section": "config", "a": 0, "b": 1}],
    "per_tensor": [
        {
            "name": "0.weight",
            "optimizer": 0,
            "first_step": 31,
            "max_rel": {"grad_norm": 0.3, "update_norm": 0.2, "param_norm": 0.0},
        },
        {
            "name": "0.bias",
            "optimizer": 0,
            "first_step": None,
            "max_rel": {"grad_norm": "NaN", "update_norm": 1e-3, "param_norm": 1e-4},
        },
    ],
}


def test_verdict_in_words() -> None:
    text = cf.verdict_text(COMPARISON, "run a", "run b")
    assert text.startswith("run b diverged from run a at step 31 (metric loss). Cause: data-order.")
    same = {"verdict": "identical", "exact": True, "steps_compared": 90}
    assert cf.verdict_text(same, "a", "b") == "b matches a bit for bit over 90 steps."


def test_per_tensor_difference_by_step_and_overlay() -> None:
    a = np.array([[1.0, 2.0, 4.0], [1.0, NAN, 1.0]])
    b = np.array([[1.0, 2.0, 5.0], [1.0, NAN, INF]])
    fig = cf.tensor_difference(["0.weight", "0.bias"], [1, 2, 3], a, b, ("a", "b"))
    heat = fig.data[0]
    assert list(heat.y) == ["0.weight", "0.bias"] and list(heat.x) == [1, 2, 3]
    assert math.isnan(heat.z[0][0]) and math.isnan(heat.z[1][1])  # equal (NaN = NaN): blank
    assert heat.z[0][2] == pytest.approx(math.log10(0.25))
    assert [(list(m.x), list(m.y)) for m in fig.data[1:]] == [([3], ["0.bias"])]
    assert "first differs: step 3" in annotations(fig)
    same = cf.tensor_difference(["0.weight", "0.bias"], [1, 2, 3], a, a.copy(), ("a", "b"))
    assert not same.data and "identical" in annotations(same)[0]
    overlay = cf.overlay(
        [("a", [1, 2], [1.0, NAN]), ("b", [1, 2], [1.0, 0.5])], [(2, "b diverges")]
    )
    assert names(overlay)[:2] == ["a", "a: NaN"] and "b diverges" in annotations(overlay)


def test_loss_difference_says_identical_in_words_and_draws_the_rest_on_a_log_axis() -> None:
    ref = ("a", [1, 2, 3, 4], [1.0, 0.9, 0.8, NAN])
    same = ("b", [1, 2, 3, 4], [1.0, 0.9, 0.8, NAN])
    split = ("c", [1, 2, 3, 4], [1.0, 0.9, 0.7, 0.6])
    fig = cf.loss_difference(ref, [same, split])
    assert fig.layout.yaxis.type == "log"
    line = fig.data[0]
    assert line.name == "c (identical before step 3)" and list(line.x) == [3]
    assert line.y[0] == pytest.approx(0.1)
    assert names(fig)[1] == "c: NaN/Inf in one run" and list(fig.data[1].x) == [4]
    assert "b: identical to a on all 4 shared steps" in annotations(fig)
    alone = cf.loss_difference(ref, [same])
    assert not alone.data and annotations(alone) == ["b: identical to a on all 4 shared steps"]


def test_fingerprint_diff_highlights_differing_fields_first() -> None:
    a = {"config": {"seed": 0, "lr": 0.1}, "versions": {"torch": "2.13"}}
    b = {"config": {"seed": 1, "lr": 0.1}, "versions": {"torch": "2.13"}}
    c = {"config": {"seed": 0, "lr": 0.1}, "versions": {"torch": "2.13"}, "pid": 7}
    shown = cf.fingerprint_diff([a, b, c], ["a", "b", "c"], COMPARISON["fingerprint_diff"])  # type: ignore[arg-type]
    table, everything = shown.children
    head, body = table.children
    assert [th.children for th in head.children.children] == ["field", "a", "b", "c"]
    rows = body.children  # only the fields that differ, every run a column
    assert [r.children[0].children.children for r in rows] == ["config.seed", "pid"]
    assert [r.className for r in rows] == ["gw-diff", "gw-diff"]
    assert [td.children for td in rows[0].children[1:]] == ["0", "1", "0"]
    assert everything.children[0].children == "all 4 fields"
    one = cf.fingerprint_diff([a, a], ["a", "a2"])
    assert "identical: all 3 fields are equal" in str(one.children[0])
    assert flatten({"x": {"y": 1, "z": {}}}) == [("x.y", 1), ("x.z", {})]


def test_ratio_keeps_nonfinite_values_and_zero_over_zero() -> None:
    update = [[1.0, 0.0, NAN, 2.0, INF], [0.5, 3.0, 1.0, -INF, 0.0]]
    param = [[2.0, 0.0, 1.0, INF, 1.0], [0.0, NAN, 0.0, 1.0, 4.0]]
    out = figures.ratio(update, param).tolist()
    assert out[0][0] == 0.5 and out[0][1] == 0.0 and math.isnan(out[0][2])
    assert out[0][3] == INF and out[0][4] == INF  # a non-finite parameter or update is shown
    assert out[1][0] == INF and math.isnan(out[1][1]) and out[1][2] == INF
    assert out[1][3] == -INF and out[1][4] == 0.0


def test_heatmap_marks_every_nonfinite_cell_with_its_kind() -> None:
    tensors, steps = ["a", "b"], [1, 2, 3]
    values = [[1.0, NAN, 2.0], [INF, 1.0, -INF]]
    fig = figures.tensor_heatmap(tensors, steps, values, title="t")
    marks = {t.name: list(zip(t.x, t.y, strict=True)) for t in fig.data[1:]}
    assert marks == {"NaN": [(2, "a")], "+Inf": [(1, "b")], "−Inf": [(3, "b")]}
    assert all(type(t) is go.Scatter for t in fig.data[1:])  # few marks: SVG


def test_heatmap_colours_nonfinite_cells_when_there_are_too_many_to_mark() -> None:
    # invariant: every non-finite cell is shown with its kind, with one drawing per kind
    # (not one SVG marker per cell) above MARKS_FROM, in traces the pages' bundle draws
    tensors, steps = [f"t{i}" for i in range(30)], list(range(1, 201))
    values = np.ones((30, 200))
    values[:12, :] = NAN  # 2,400 NaN cells
    values[20, 5:8] = INF
    assert np.isnan(values).sum() > figures.MARKS_FROM
    fig = figures.tensor_heatmap(tensors, steps, values, title="t")
    assert {t.type for t in fig.data} <= CARTESIAN_TRACES
    layers = {t.legendgroup: t for t in fig.data[1:] if t.type == "heatmap"}
    assert set(layers) == {"cells-nan", "cells-inf"}
    nan_cells = ~np.isnan(np.asarray(layers["cells-nan"].z, dtype=float))
    inf_cells = ~np.isnan(np.asarray(layers["cells-inf"].z, dtype=float))
    assert (nan_cells == np.isnan(values)).all() and (inf_cells == np.isposinf(values)).all()
    legend = {t.name: t.legendgroup for t in fig.data if t.type == "scatter"}
    assert legend == {"NaN (cells)": "cells-nan", "+Inf (cells)": "cells-inf"}
