"""Figures and tables of the compare page, pure functions of the drift API's JSON shapes.

Shapes (``/api/v1/compare``): a ``Comparison`` has ``verdict``, ``step``, ``metric``,
``param``, ``cause``, ``message``, ``fingerprint_diff`` (``[{field, section, a, b}]``) and
``per_tensor`` (``[{name, optimizer, first_step, max_rel: {metric: value}}]``).

Example::

    fig = overlay([("run a", [1, 2], [0.9, 0.8])], [(2, "b diverges")])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
from dash import html

from gradwatch_dashboard.components import flatten, short, table
from gradwatch_dashboard.figures import base, empty, label, line, mark_step, nonfinite_markers
from gradwatch_dashboard.values import kind, log10, to_float

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
METRICS = ("grad_norm", "update_norm", "param_norm")


def overlay(
    curves: Sequence[tuple[str, Sequence[int], Sequence[float]]],
    marks: Sequence[tuple[int, str]],
    *,
    title: str = "Loss of the selected runs",
) -> go.Figure:
    """One loss curve per run, with every divergence step marked."""
    if not any(steps for _, steps, _ in curves):
        return empty(title, "pick two or more runs (or a replicate group) that have steps")
    fig = base(title, 360)
    top = max((v for _, _, ys in curves for v in ys if math.isfinite(v)), default=1.0)
    for i, (name, steps, values) in enumerate(curves):
        color = COLORS[i % len(COLORS)]
        fig.add_trace(
            line(
                steps,
                [v if math.isfinite(v) else None for v in values],
                name,
                line={"color": color, "width": 1.5},
            )
        )
        for trace in nonfinite_markers(steps, values, top):
            fig.add_trace(trace)
    for step, text in marks:
        mark_step(fig, step, text)
    fig.update_layout(showlegend=True, legend={"orientation": "h", "y": -0.2})
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="loss")
    return fig


def per_tensor(rows: Sequence[dict[str, Any]], *, title: str = "") -> go.Figure:
    """Tensors × metrics of the largest relative difference (log scale); exact zeros blank."""
    title = title or "Per-tensor difference (max relative, log₁₀)"
    if not rows:
        return empty(title, "no per-tensor differences to show")
    names = [label(r["name"]) for r in rows]
    values = [[to_float((r.get("max_rel") or {}).get(m, math.nan)) for m in METRICS] for r in rows]
    z = [[log10(v) for v in row] for row in values]
    text = [
        [
            f"{m}: {v:.3g}"
            + (f", first at step {r['first_step']}" if r.get("first_step") is not None else "")
            for m, v in zip(METRICS, row, strict=True)
        ]
        for r, row in zip(rows, values, strict=True)
    ]
    fig = base(title, min(560, 140 + 22 * len(rows)))  # every label shows up to ~19 tensors
    fig.add_trace(
        go.Heatmap(
            x=list(METRICS),
            y=names,
            z=z,
            text=text,
            colorscale="Reds",
            hovertemplate="%{y}<br>%{text}<extra></extra>",
            hoverongaps=False,
            colorbar={"title": {"text": "log₁₀ rel"}, "thickness": 12},
        )
    )
    bad = [
        (m, label(r["name"]))
        for r, row in zip(rows, values, strict=True)
        for m, v in zip(METRICS, row, strict=True)
        if kind(v) != "finite"
    ]
    if bad:
        fig.add_trace(
            go.Scatter(
                x=[b[0] for b in bad],
                y=[b[1] for b in bad],
                mode="markers",
                marker={"symbol": "x", "color": "#111", "size": 8},
                hovertemplate="%{y} %{x}: not finite<extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_xaxes(side="top")  # the metric names sit where the reader starts
    fig.update_layout(margin={"t": 90})
    return fig


def verdict_text(cmp: dict[str, Any], name_a: str, name_b: str) -> str:
    """The verdict and its cause in one or two sentences."""
    verdict = cmp.get("verdict")
    if verdict == "identical":
        exact = "bit for bit" if cmp.get("exact") else "within tolerance"
        return f"{name_b} matches {name_a} {exact} over {cmp.get('steps_compared', 0)} steps."
    if verdict == "not-comparable":
        return f"{name_b} cannot be compared with {name_a}: {cmp.get('message', '')}"
    cause = f" Cause: {cmp['cause']}." if cmp.get("cause") else ""
    message = str(cmp.get("message", ""))
    split = "the runs split "
    if message.startswith(split):  # already says where and why: said once
        return f"{name_b} diverged from {name_a} {message.removeprefix(split)}{cause}"
    where = f"at step {cmp.get('step')}" if cmp.get("step") is not None else ""
    what = ", ".join(f"{k} {cmp[k]}" for k in ("metric", "param") if cmp.get(k))
    return f"{name_b} diverged from {name_a} {where} ({what}).{cause} {message}"


def fingerprint_diff(
    fa: dict[str, Any],
    fb: dict[str, Any],
    listed: Sequence[dict[str, Any]] = (),
    names: tuple[str, str] = ("A", "B"),
) -> html.Table:
    """Fields of two fingerprints side by side, in three bands: the differences the
    comparison lists as causes or evidence (highlighted), then the fields that differ
    between any two processes (process id, RNG-state hashes: muted), then the equal ones."""
    a, b = dict(flatten(fa)), dict(flatten(fb))
    meaningful = {str(d["field"]) for d in listed if not _process_noise(str(d["field"]))}
    noise = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} - meaningful
    bands = [
        (sorted(meaningful), "gw-diff"),
        (sorted(noise), "gw-diff-noise"),
        (sorted((a.keys() | b.keys()) - meaningful - noise), ""),
    ]
    rows = [
        html.Tr(
            [
                html.Td(html.Code(key)),
                html.Td(short(a.get(key, "—"))),
                html.Td(short(b.get(key, "—"))),
            ],
            className=cls,
        )
        for keys, cls in bands
        for key in keys
    ]
    head = html.Tr([html.Th("field"), html.Th(names[0]), html.Th(names[1])])
    return html.Table(
        [html.Thead(head), html.Tbody(rows)], className="gw-table", id="fingerprint-diff"
    )


def _process_noise(field: str) -> bool:
    """Fields that differ between any two processes and say nothing about drift."""
    return field.endswith("_state_sha256") or field in ("device.pid",)


def deliveries_summary(counts: dict[str, int]) -> str:
    """``2 delivered, 1 failed`` (or ``no webhook``)."""
    parts = [f"{n} {k}" for k, n in counts.items() if n]
    return ", ".join(parts) if parts else "no webhook"


def rules_table(rules: Sequence[dict[str, Any]], delete: Any) -> html.Table:
    """Alert rules; ``delete(rule_id)`` makes the remove button of a row."""
    return table(
        ["project", "check", "min severity", "group", "webhook", "enabled", ""],
        [
            [
                r["project"],
                r.get("check") or "any",
                r.get("min_severity") or "any",
                r.get("group") or "any",
                r.get("webhook_url") or "—",
                "yes" if r.get("enabled") else "no",
                delete(r["id"]),
            ]
            for r in rules
        ],
        id="rules-list",
    )
