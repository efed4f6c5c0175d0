"""The dashboard defects a newcomer met, each held by its figure builder or component: the
learning-rate axis, the NaN run's loss axis, the lifecycle window, the findings table, the
badges and the compare page's heatmap and fingerprint table."""

from __future__ import annotations

from typing import Any

import numpy as np
from dash import dcc, html

from gradwatch_dashboard import compare_figures as cf
from gradwatch_dashboard import figures
from gradwatch_dashboard.components import findings_list, health, status_badge
from gradwatch_dashboard.pages.run import WINDOW, lifecycle_start


def walk(node: Any) -> list[Any]:
    """Every component under ``node`` (itself included)."""
    out = [node]
    children = getattr(node, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, (str, int, float)):
            out += walk(child)
    return out


def text(node: Any) -> str:
    parts = [c for n in walk(node) for c in ([n.children] if isinstance(n.children, str) else [])]
    return " ".join(parts)


def test_a_constant_learning_rate_sits_mid_axis() -> None:
    steps = list(range(1, 301))
    fig = figures.loss_figure((steps, [1.0] * 300), [("lr", steps, [0.01] * 300)])
    assert fig.layout.yaxis2.type == "linear"
    low, high = fig.layout.yaxis2.range
    assert low == 0.005 and high == 0.015  # not lr = 0.01 at the bottom of a -1..1 axis


def test_the_loss_axis_spans_the_losses_before_the_incident_and_marks_the_rest() -> None:
    steps = list(range(1, 161))
    healthy = [2.0 - s / 200 for s in range(160)]
    fig = figures.loss_figure((steps, healthy), [])
    assert fig.layout.yaxis.type == "linear"
    # a loss that blows up to 1e27 then NaN: the axis spans the steps before (not 1e27 on
    # a log axis that flattens them); the blown-up steps are marked at the top edge
    with_nan = [*healthy[:150], float("nan"), float("inf"), *[1e27] * 8]
    fig = figures.loss_figure((steps, with_nan), [])
    low, high = fig.layout.yaxis.range
    assert fig.layout.yaxis.type == "linear" and low < min(healthy[:150]) and high < 3
    pre = (max(healthy[:150]) - min(healthy[:150])) / (high - low)
    assert pre > 0.8  # the healthy losses span most of the plot's height
    names = {t.name: t for t in fig.data}
    assert list(names["loss above the axis"].x) == list(range(153, 161))
    assert names["loss above the axis"].y[0] == high and names["NaN"].y[0] == high
    assert list(names["NaN"].x) == [151] and list(names["+Inf"].x) == [152]
    # the run's first non-finite step elsewhere (a gradient) bounds the range as well
    fig = figures.loss_figure((steps, with_nan), [], before=100)
    assert fig.layout.yaxis.range[1] < max(healthy[:150]) + 0.1
    # every trace named in the legend
    assert fig.layout.showlegend and all(t.name for t in fig.data)


def test_the_lifecycle_window_opens_at_the_first_lifecycle_finding() -> None:
    assert lifecycle_start(300, None, {2: ["stale-grad"], 40: ["stale-grad"]}) == 0
    assert lifecycle_start(300, None, {150: ["step-without-backward"]}) == 147
    assert lifecycle_start(300, None, {}) == 300 - WINDOW + 1
    assert lifecycle_start(300, 200, {2: ["stale-grad"]}) == 200 - WINDOW // 2


def finding(**kw: Any) -> dict[str, Any]:
    return {"severity": "warning", "message": "m", "step": None, "param": None, **kw}


def test_findings_table_keeps_check_and_step_on_one_line_and_names_run_level_findings() -> None:
    table = findings_list(
        "r2",
        [
            finding(check="loss-diverging", step=139),
            finding(check="nonfinite-grad", step=152, param="0.weight"),
        ],
    )
    rows = [n for n in walk(table) if isinstance(n, html.Tr)][1:]
    rows = [
        r for r in rows if text(r.children[1]) != "incident"
    ]  # the findings, not their incidents
    check, step, tensor = (rows[0].children[i].children for i in (1, 2, 3))
    assert "gw-nowrap" in check.className and "gw-nowrap" in step.className
    assert text(tensor) == "whole run"
    assert text(rows[1].children[3]) == "0.weight"


def test_a_drift_finding_links_to_its_comparison() -> None:
    drift = finding(check="repro-drift", step=101, details={"reference": "r1"})
    links = [n for n in walk(findings_list("r2", [drift])) if isinstance(n, dcc.Link)]
    assert "/compare?runs=r1,r2" in [link.href for link in links]


def test_health_counts_every_severity_and_a_nan_run_is_not_a_green_finish() -> None:
    counts = {"error": 7, "warning": 6, "info": 1}
    badges = [n for n in walk(health(counts)) if "gw-badge" in (n.className or "")]
    assert [b.children for b in badges] == ["7 errors", "6 warnings", "1 info"]
    assert status_badge("finished", counts).className == "gw-badge gw-error"
    assert status_badge("finished", counts).children == "finished with errors"
    assert status_badge("finished", {"error": 0}).className == "gw-badge gw-finished"
    assert status_badge("running", counts).children == "running"


def test_the_compare_heatmap_has_a_step_axis_and_a_short_title() -> None:
    a = np.ones((6, 4))
    b = a.copy()
    b[:, 2:] = 2.0
    fig = cf.tensor_difference([f"{i}.weight" for i in range(6)], [1, 2, 3, 4], a, b, ("r", "d"))
    assert fig.layout.height <= 280 and fig.layout.xaxis.title.text == "step"
    assert "d vs r" in fig.layout.title.text
    many = cf.tensor_difference(
        [f"{i}" for i in range(600)], [1], np.ones((600, 1)), 2 * np.ones((600, 1)), ("r", "d")
    )
    assert many.layout.height <= 700


def test_the_fingerprint_table_highlights_only_what_explains_a_difference() -> None:
    fa = {"device": {"pid": 1, "num_threads": 1}, "seeds": {"python_random_state_sha256": "a"}}
    fb = {"device": {"pid": 2, "num_threads": 2}, "seeds": {"python_random_state_sha256": "b"}}
    listed = [
        {"field": "device.num_threads", "section": "environment", "a": 1, "b": 2},
        {"field": "seeds.python_random_state_sha256", "section": "seeds", "a": "a", "b": "b"},
    ]
    shown = cf.fingerprint_diff([fa, fb], ["replicate-a", "drifting"], listed)
    rows = [n for n in walk(shown.children[0]) if isinstance(n, html.Tr)]
    assert [text(c) for c in rows[0].children] == ["field", "replicate-a", "drifting"]
    by_class = {text(r.children[0]): r.className for r in rows[1:]}
    assert by_class == {
        "device.num_threads": "gw-diff",
        "device.pid": "gw-diff-noise",
        "seeds.python_random_state_sha256": "gw-diff-noise",
    }


def test_the_verdict_says_where_and_why_once() -> None:
    cmp = {
        "verdict": "diverged",
        "step": 101,
        "cause": "data-order",
        "message": "the runs split at step 101 (batch; first differing tensor 0.weight): "
        "the model received a different batch at that step.",
    }
    assert cf.verdict_text(cmp, "replicate-a", "drifting") == (
        "drifting diverged from replicate-a at step 101 (batch; first differing tensor "
        "0.weight): the model received a different batch at that step. Cause: data-order."
    )
