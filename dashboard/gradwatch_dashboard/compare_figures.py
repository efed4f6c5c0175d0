"""Figures and tables of the compare page, pure functions of the drift API's JSON shapes.

Shapes (``/api/v1/compare``): a ``Comparison`` has ``verdict``, ``step``, ``metric``,
``param``, ``cause``, ``message``, ``fingerprint_diff`` (``[{field, section, a, b}]``) and
``per_tensor`` (``[{name, optimizer, first_step, max_rel: {metric: value}}]``).

Example::

    fig = overlay([("run a", [1, 2], [0.9, 0.8])], [(2, "b diverges")])
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from dash import html

from gradwatch_dashboard.components import flatten, short, table
from gradwatch_dashboard.figures import (
    COLORBAR,
    COLORS,
    LEGEND,
    base,
    empty,
    label,
    line,
    mark_step,
    nonfinite_markers,
)

DASHES = ("solid", "dash", "dot", "dashdot")  # overlaid replicates stay visible under each other


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
                line={"color": color, "width": 2.5 - 0.5 * min(i, 3), "dash": DASHES[i % 4]},
            )
        )
        for trace in nonfinite_markers(steps, values, top, legendgroup=name):
            trace.name = f"{label(name)}: {trace.name}"
            fig.add_trace(trace)
    for step, text in marks:
        mark_step(fig, step, text)
    fig.update_layout(showlegend=True, legend=LEGEND)
    fig.update_xaxes(title_text="step")
    fig.update_yaxes(title_text="loss")
    return fig


def same(a: float, b: float) -> bool:
    """Bit-equal as the drift check sees it: NaN equals NaN, ``0.0`` equals ``-0.0``."""
    return a == b or (math.isnan(a) and math.isnan(b))


def loss_difference(
    ref: tuple[str, Sequence[int], Sequence[float]],
    others: Sequence[tuple[str, Sequence[int], Sequence[float]]],
) -> go.Figure:
    """``|loss − reference loss|`` against step, log scale, one line per other run (named
    with the step where it first differs); a run equal to the reference on every shared
    step is said "identical" in words (a log axis cannot draw its zeros), and a step where
    one loss is finite and the other not is marked at the top."""
    ref_name, ref_steps, ref_values = ref
    title = f"Loss difference from {ref_name} (|Δ loss|, log scale)"
    by_step = dict(zip(ref_steps, ref_values, strict=False))
    fig = base(title, 300)
    identical: list[str] = []
    for i, (name, steps, values) in enumerate(others):
        shared = [(s, v, by_step[s]) for s, v in zip(steps, values, strict=False) if s in by_step]
        differ = [(s, v, r) for s, v, r in shared if not same(v, r)]
        if not differ:
            identical.append(
                f"{label(name)}: identical to {label(ref_name)} on all {len(shared):,} shared steps"
            )
            continue
        first = differ[0][0]
        finite = [(s, abs(v - r)) for s, v, r in differ if math.isfinite(v) and math.isfinite(r)]
        color = COLORS[(i + 1) % len(COLORS)]
        before = f" (identical before step {first})" if shared and first > shared[0][0] else ""
        fig.add_trace(
            line(
                [s for s, _ in finite],
                [d for _, d in finite],
                f"{name}{before}",
                mode="lines+markers" if len(finite) <= 30 else "lines",
                line={"color": color, "width": 1.5},
                hovertemplate=f"{label(name)}, step %{{x}}: |Δ| = %{{y:.3g}}<extra></extra>",
            )
        )
        broken = [s for s, v, r in differ if not (math.isfinite(v) and math.isfinite(r))]
        if broken:
            fig.add_trace(
                go.Scatter(
                    x=broken,
                    y=[1.0] * len(broken),
                    yaxis="y",
                    mode="markers",
                    name=f"{label(name)}: NaN/Inf in one run",
                    marker={"symbol": "x", "color": color, "size": 9},
                    hovertemplate="step %{x}: not finite in one run<extra></extra>",
                )
            )
    if not fig.data:
        return empty(title, "; ".join(identical) or "no shared steps to compare", height=140)
    fig.update_yaxes(type="log", title_text="|Δ loss|", exponentformat="power")
    fig.update_xaxes(title_text="step")
    fig.update_layout(showlegend=True, legend=LEGEND)
    if identical:
        fig.add_annotation(
            text="; ".join(identical),
            showarrow=False,
            x=0,
            xanchor="left",
            y=-0.32,
            xref="paper",
            yref="paper",
            font={"color": "#2da44e"},
        )
        fig.update_layout(margin={"b": 70})
    return fig


def relative_difference(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``|b − a| / |a|`` cell by cell: 0 where the two are equal (NaN and NaN too), +Inf
    where one is finite and the other not, ``|b|`` where ``a`` is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray[Any, Any] = np.abs(b - a) / np.where(a == 0, 1.0, np.abs(a))
    out[(a == b) | (np.isnan(a) & np.isnan(b))] = 0.0
    out[np.isfinite(a) != np.isfinite(b)] = math.inf
    both_bad = ~np.isfinite(a) & ~np.isfinite(b) & ~((a == b) | (np.isnan(a) & np.isnan(b)))
    out[both_bad] = math.inf
    return out


def tensor_difference(
    tensors: Sequence[str],
    steps: Sequence[int],
    a: np.ndarray[Any, Any],
    b: np.ndarray[Any, Any],
    names: tuple[str, str],
    *,
    unit: str = "gradient norm",
) -> go.Figure:
    """Tensors × steps of the relative difference of ``unit`` between two runs (log
    colour; blank where equal), the first differing step marked; "identical" in words when
    every cell is equal."""
    ref, other = names
    title = f"Per-tensor difference, {other} vs {ref}: relative {unit} by step"
    if not len(tensors) or not len(steps):
        return empty(title, "no steps to compare")
    rel = relative_difference(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    if not rel.any():
        return empty(
            title,
            f"identical: every tensor's {unit} in {other} equals {ref}'s at every step",
            height=140,
        )
    fig = base(title, max(260, min(700, 80 + 14 * len(tensors))))
    names_y = [label(t) for t in tensors]
    z = np.full(rel.shape, np.nan, dtype=np.float32)
    good = np.isfinite(rel) & (rel > 0)
    z[good] = np.log10(rel[good])
    fig.add_trace(
        go.Heatmap(
            x=np.asarray(steps),
            y=names_y,
            z=z,
            colorscale="Reds",
            colorbar={"title": {"text": "log₁₀ |Δ|/|ref|"}, **COLORBAR},
            hovertemplate="%{y}<br>from step %{x}<br>log₁₀ rel = %{z:.2f}<extra></extra>",
            hoverongaps=False,
        )
    )
    rows, cols = np.nonzero(np.isinf(rel))
    if len(rows):
        fig.add_trace(
            go.Scatter(
                x=[steps[j] for j in cols.tolist()],
                y=[names_y[i] for i in rows.tolist()],
                mode="markers",
                name="NaN/Inf in one run",
                marker={"symbol": "x", "color": "#111", "size": 7},
                hovertemplate="%{y}<br>from step %{x}: not finite in one run<extra></extra>",
            )
        )
        fig.update_layout(showlegend=True, legend=LEGEND)
    first = int(np.nonzero(rel.any(axis=0))[0][0])
    mark_step(fig, int(steps[first]), f"first differs: step {steps[first]}")
    fig.update_yaxes(autorange="reversed", type="category", tickfont={"size": 10})
    fig.update_xaxes(title_text="step")
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


HASH = re.compile(r"[0-9a-f]{16,}")
HASH_SHOWN = 12
MISSING = object()  # a field one run's fingerprint does not have


def cell(value: Any) -> Any:
    """A fingerprint value for a table cell: a hash cut to its first 12 characters, the
    whole of it on hover; anything else on one line (``short``)."""
    if value is MISSING:
        return html.Span("—", className="gw-muted")
    text = short(value)
    if HASH.fullmatch(str(value)):
        return html.Span(text[:HASH_SHOWN] + "…", title=str(value), className="gw-hash")
    return html.Span(text, title=str(value)) if text != str(value) else text


def fingerprint_diff(
    prints: Sequence[dict[str, Any]],
    names: Sequence[str],
    listed: Sequence[dict[str, Any]] = (),
) -> html.Div:
    """The fingerprints of several runs side by side, one column per run (the first is
    the reference): only the fields that differ, those the comparison lists as causes or
    evidence first (highlighted), then those that differ between any two processes
    (process id, RNG-state hashes: muted); every field behind one "all fields" click."""
    flat = [dict(flatten(fp or {})) for fp in prints]
    fields = sorted(set().union(*flat)) if flat else []
    differ = {k for k in fields if len({repr(f.get(k, MISSING)) for f in flat}) > 1}
    meaningful = {str(d["field"]) for d in listed if not _process_noise(str(d["field"]))}
    meaningful |= {k for k in differ if not _process_noise(k)}
    noise = differ - meaningful
    head = html.Thead(html.Tr([html.Th("field"), *(html.Th(n) for n in names)]))

    def row(key: str, cls: str) -> html.Tr:
        cells = [html.Td(cell(f.get(key, MISSING))) for f in flat]
        return html.Tr([html.Td(html.Code(key)), *cells], className=cls)

    rows = [row(k, "gw-diff") for k in sorted(meaningful & differ)]
    rows += [row(k, "gw-diff-noise") for k in sorted(noise)]
    if not rows:
        rows = [
            html.Tr(
                html.Td(f"identical: all {len(fields)} fields are equal", colSpan=len(names) + 1),
                id="fingerprint-identical",
            )
        ]
    everything = html.Table(
        [head, html.Tbody([row(k, "gw-diff" if k in differ else "") for k in fields])],
        className="gw-table gw-fp-table",
    )
    return html.Div(
        [
            html.Table(
                [head, html.Tbody(rows)], className="gw-table gw-fp-table", id="fingerprint-diff"
            ),
            html.Details(
                [html.Summary(f"all {len(fields)} fields"), everything],
                id="fingerprint-all",
            ),
        ]
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
