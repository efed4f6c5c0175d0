"""Figures of the run page: pure functions of the API's JSON shapes, each with an empty state.

Every builder takes decoded API data (see :mod:`gradwatch_dashboard.values`) and returns a
``plotly.graph_objects.Figure``; none of them reads the network. Non-finite values are
data: heatmaps leave their cells blank and mark them (NaN ✕, +Inf ▲, −Inf ▼), line charts
draw them as markers at the top of the plot. Every trace is one of plotly.js's cartesian
bundle (scatter, heatmap, bar: ``dash_app.CARTESIAN_TRACES``), the bundle the pages load: no
WebGL. The pages ask the API for at most a few thousand points per line, and a heatmap with
more than ``MARKS_FROM`` non-finite cells colours them instead of marking each one.

Example::

    fig = tensor_heatmap(["0.weight"], [1, 65], [[0.5, float("nan")]], title="‖g‖")
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from gradwatch_dashboard.values import grid, kind

# non-finite cells of a heatmap above which they are coloured cells (a heatmap layer, drawn
# as one image) instead of one SVG marker each (thousands of markers take seconds to draw)
MARKS_FROM = 2000
BAD = {
    "nan": ("x", "#d62728", "NaN"),
    "inf": ("triangle-up", "#111", "+Inf"),
    "-inf": ("triangle-down", "#111", "−Inf"),
}
# the colours of non-finite cells where there are too many to mark (+Inf and −Inf told apart)
CELL_COLORS = {"nan": "#d62728", "inf": "#111", "-inf": "#7f7f7f"}
FONT = {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12}


AXIS = {"gridcolor": "#eceef1", "zerolinecolor": "#d0d4d9", "linecolor": "#d0d4d9"}
# one number format on every value axis (0.001, 12.5, 1e+27: not 1T next to 10³⁰)
YAXIS = {**AXIS, "tickformat": "~g"}
# every chart's legend: a column right of the plot, from its top (a colour bar sits under it)
LEGEND = {
    "orientation": "v",
    "x": 1.02,
    "xanchor": "left",
    "y": 1.0,
    "yanchor": "top",
    "font": {"size": 11},
}
COLORBAR = {"thickness": 12, "len": 0.55, "y": 0, "yanchor": "bottom"}  # under the legend


def label(text: str) -> str:
    """User text (tensor, run and check names, messages) as a Plotly label: Plotly renders
    a subset of HTML in labels (``<a href>``, ``<b>``, ``<br>``), so ``&``, ``<`` and ``>``
    are escaped; it shows the entities as the characters they stand for."""
    return html.escape(str(text), quote=False)


def style(title: str, height: int) -> dict[str, Any]:
    """The dashboard's look as layout keywords (no Plotly template: merging one into every
    figure cost seconds per page)."""
    return {
        "title": {"text": label(title), "x": 0.01, "font": {"size": 14}},
        "height": height,
        "margin": {"l": 60, "r": 20, "t": 40, "b": 40},
        "template": "none",
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "font": FONT,
        "showlegend": False,
        "xaxis": AXIS,
        "yaxis": YAXIS,
    }


def base(title: str, height: int = 320) -> go.Figure:
    """An empty figure with the dashboard's look."""
    return go.Figure(layout=style(title, height))


def empty(title: str, why: str, height: int = 220) -> go.Figure:
    """The empty state: no axes, one sentence saying why there is nothing to draw."""
    fig = base(title, height)
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False)
    fig.add_annotation(text=label(why), showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    return fig


def line(x: Sequence[int], y: Sequence[float | None], name: str, **kw: Any) -> go.Scatter:
    """A line trace (SVG: the pages ask for at most a few thousand points, and Plotly
    simplifies the path); ``None`` and NaN in ``y`` are gaps. Its data are numpy arrays:
    Plotly checks them in one step (a list, value by value: 40 ms for a 2,000-point loss)
    and sends them as binary typed arrays."""
    xs, ys = np.asarray(x), np.asarray(y, dtype=np.float64)  # None -> NaN
    mode = kw.pop("mode", "lines")
    return go.Scatter(x=xs, y=ys, name=label(name), mode=mode, **kw)


def nonfinite_markers(
    steps: Sequence[int], values: Sequence[float], y: float, **kw: Any
) -> list[go.Scatter]:
    """One marker trace per kind of non-finite value, drawn at height ``y``."""
    traces = []
    for what, (symbol, color, bad) in BAD.items():
        xs = [s for s, v in zip(steps, values, strict=False) if kind(v) == what]
        if xs:
            traces.append(
                go.Scatter(
                    x=xs,
                    y=[y] * len(xs),
                    mode="markers",
                    name=bad,
                    marker={"symbol": symbol, "color": color, "size": 9},
                    hovertemplate=f"step %{{x}}: {bad}<extra></extra>",
                    **kw,
                )
            )
    return traces


def mark_step(fig: go.Figure, step: int | None, text: str, color: str = "#d62728") -> None:
    """A dashed vertical line at ``step`` with a label on top (nothing when ``None``)."""
    if step is None:
        return
    fig.add_vline(x=step, line={"dash": "dash", "color": color, "width": 1})
    fig.add_annotation(
        x=step,
        y=1.0,
        yref="paper",
        text=label(text),
        showarrow=False,
        yanchor="bottom",
        font={"color": color, "size": 11},
    )


def reference_values(
    steps: Sequence[int], values: Sequence[float], before: int | None = None
) -> list[float]:
    """The finite values that set a chart's range: those before the first non-finite value
    (and before step ``before``, the run's first non-finite step anywhere), so the loss
    before an incident is readable; every finite value when none comes before it."""
    cut = next((s for s, v in zip(steps, values, strict=False) if not math.isfinite(v)), None)
    if before is not None:
        cut = before if cut is None else min(cut, before)
    ref = [
        v
        for s, v in zip(steps, values, strict=False)
        if math.isfinite(v) and (cut is None or s < cut)
    ]
    return ref or [v for v in values if math.isfinite(v)]


def value_range(ref: Sequence[float], kind: str) -> tuple[float, float]:
    """``(low, high)`` of the axis around ``ref`` with a margin (data units)."""
    lo, hi = (min(ref), max(ref)) if ref else (0.0, 1.0)
    if kind == "log":
        return lo / 10**0.1, hi * 10**0.1
    pad = (hi - lo) * 0.08 or abs(hi) * 0.1 or 1.0
    return lo - pad, hi + pad


def off_scale(
    steps: Sequence[int],
    values: Sequence[float],
    bounds: tuple[float, float],
    name: str,
    color: str,
    **kw: Any,
) -> list[go.Scatter]:
    """Finite values outside ``bounds`` as marks at the edge they passed (△ above, ▽
    below), each named in the legend, the value on hover."""
    lo, hi = bounds
    out = []
    for where, edge, symbol in (
        ("above", hi, "triangle-up-open"),
        ("below", lo, "triangle-down-open"),
    ):
        off = [
            (s, v)
            for s, v in zip(steps, values, strict=False)
            if math.isfinite(v) and (v > hi if where == "above" else v < lo)
        ]
        if off:
            out.append(
                go.Scatter(
                    x=[s for s, _ in off],
                    y=[edge] * len(off),
                    customdata=[v for _, v in off],
                    mode="markers",
                    name=label(f"{name} {where} the axis"),
                    marker={"symbol": symbol, "color": color, "size": 8},
                    hovertemplate=f"step %{{x}}: {label(name)} %{{customdata:.4~g}}<extra></extra>",
                    cliponaxis=False,
                    **kw,
                )
            )
    return out


def loss_figure(
    loss: tuple[Sequence[int], Sequence[float]] | None,
    lrs: Sequence[tuple[str, Sequence[int], Sequence[float]]],
    *,
    focus: int | None = None,
    before: int | None = None,
) -> go.Figure:
    """Loss (top) and learning rate(s) (bottom) over steps. The loss axis spans the finite
    losses before the first non-finite step (``reference_values``), so its trend before an
    incident can be read; losses beyond it are drawn at the edge (△ above, ▽ below) and
    non-finite ones at the top (✕ NaN, ▲ +Inf), every kind named in the legend."""
    if loss is None or not loss[0]:
        return empty("Loss and learning rate", "no steps recorded yet")
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.06
    )
    fig.update_layout(**style("Loss and learning rate", 380), xaxis2=AXIS, yaxis2=YAXIS)
    steps, values = loss
    ref = reference_values(steps, values, before)
    kind = scale([ref])
    lo, hi = value_range(ref, kind)
    inside = [v if math.isfinite(v) and lo <= v <= hi else None for v in values]
    fig.add_trace(line(steps, inside, "loss", line={"color": "#1f77b4"}), row=1, col=1)
    for trace in off_scale(steps, values, (lo, hi), "loss", "#1f77b4"):
        fig.add_trace(trace, row=1, col=1)
    for trace in nonfinite_markers(steps, values, hi, cliponaxis=False):
        fig.add_trace(trace, row=1, col=1)
    for name, x, y in lrs:
        fig.add_trace(line(x, y, name, line={"color": "#2ca02c"}), row=2, col=1)
    axis_range = [math.log10(lo), math.log10(hi)] if kind == "log" else [lo, hi]
    fig.update_yaxes(title_text="loss", row=1, col=1, type=kind, range=axis_range)
    lr_values = [ys for _, _, ys in lrs]
    lr_scale = scale(lr_values, spread=100)
    fig.update_yaxes(title_text="lr", row=2, col=1, type=lr_scale)
    flat = flat_range(lr_values)
    if flat is not None and lr_scale == "linear":
        fig.update_yaxes(range=flat, row=2, col=1)
    fig.update_xaxes(title_text="step", row=2, col=1)
    fig.update_layout(showlegend=True, legend=LEGEND)
    mark_step(fig, focus, f"step {focus}", "#555")
    return fig


def scale(series: Sequence[Sequence[float]], spread: float = 1000) -> str:
    """``log`` when every finite value is positive and they span more than ``spread`` (a
    loss that blows up to 1e27 would flatten its healthy steps to a line at 0), else
    ``linear``."""
    values = [v for ys in series for v in ys if math.isfinite(v)]
    positive = bool(values) and min(values) > 0
    return "log" if positive and max(values) / min(values) > spread else "linear"


def flat_range(series: Sequence[Sequence[float]]) -> list[float] | None:
    """A y range around a constant series (Plotly's own puts lr = 0.01 at the bottom of a
    −1…1 axis); None when the values vary."""
    values = [v for ys in series for v in ys if math.isfinite(v)]
    if not values or max(values) != min(values):
        return None
    pad = abs(values[0]) / 2 or 1.0
    return [values[0] - pad, values[0] + pad]


def tensor_heatmap(
    tensors: Sequence[str],
    steps: Sequence[int],
    values: Sequence[Sequence[float]] | np.ndarray[Any, Any],
    *,
    title: str,
    unit: str = "",
    focus: int | None = None,
) -> go.Figure:
    """Tensors × steps on a log color scale; non-finite cells left blank and marked."""
    if not tensors or not steps:
        return empty(title, "no steps recorded yet")
    fig = base(title, height=max(260, min(900, 60 + 14 * len(tensors))))
    grid = np.asarray(values, dtype=np.float64)
    tensors = [label(t) for t in tensors]
    fig.add_trace(
        go.Heatmap(
            x=np.asarray(steps),
            y=list(tensors),
            z=log_grid(grid),
            colorscale="Viridis",
            colorbar={"title": {"text": f"log₁₀ {unit}".strip()}, **COLORBAR},
            hovertemplate="%{y}<br>from step %{x}<br>log₁₀ = %{z:.2f}<extra></extra>",
            hoverongaps=False,
            showlegend=False,  # the colour bar is its key
        )
    )
    masks = {
        "nan": np.isnan(grid),
        "inf": np.isposinf(grid),
        "-inf": np.isneginf(grid),
    }  # one vectorised pass per kind (a Python loop over 60,000 cells cost a tenth of a second)
    cells = sum(int(m.sum()) for m in masks.values()) > MARKS_FROM
    for what, (symbol, color, bad) in BAD.items():
        rows, cols = np.nonzero(masks[what].reshape(grid.shape[0], -1))
        if not len(rows):
            continue
        if cells:
            add_cells(fig, steps, tensors, masks[what], what)
            continue
        fig.add_trace(
            go.Scatter(
                x=[steps[j] for j in cols.tolist()],
                y=[tensors[i] for i in rows.tolist()],
                mode="markers",
                name=bad,
                marker={"symbol": symbol, "color": color, "size": 7},
                hovertemplate=f"%{{y}}<br>from step %{{x}}: {bad}<extra></extra>",
            )
        )
    fig.update_yaxes(autorange="reversed", type="category", tickfont={"size": 10})
    fig.update_xaxes(title_text="step")
    fig.update_layout(showlegend=True, legend=LEGEND)
    mark_step(fig, focus, f"step {focus}", "#555")
    return fig


def add_cells(
    fig: go.Figure,
    steps: Sequence[int],
    tensors: Sequence[str],
    mask: np.ndarray[Any, Any],
    what: str,
) -> None:
    """The cells of ``mask`` (one kind of non-finite value) coloured over a heatmap, as one
    heatmap layer with gaps elsewhere, and its legend entry (a square of its colour; a
    heatmap has none of its own): one drawing for any number of cells."""
    color, bad = CELL_COLORS[what], BAD[what][2]
    group = f"cells-{what}"
    fig.add_trace(
        go.Heatmap(
            x=np.asarray(steps),
            y=list(tensors),
            z=np.where(mask.reshape(len(tensors), -1), np.float32(1), np.float32(np.nan)),
            colorscale=[[0, color], [1, color]],
            showscale=False,
            hoverongaps=False,
            legendgroup=group,
            hovertemplate=f"%{{y}}<br>from step %{{x}}: {bad}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            name=f"{bad} (cells)",
            legendgroup=group,
            marker={"symbol": "square", "color": color, "size": 10},
            hoverinfo="skip",
        )
    )


def log_grid(values: Sequence[Sequence[float]] | np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``log10`` of a grid, NaN (a gap) where a value is not positive and finite; a numpy
    array, which Plotly validates and sends as binary (a list of lists cost seconds)."""
    grid = np.asarray(values, dtype=np.float64)
    out = np.full(grid.shape, np.nan, dtype=np.float32)  # half the bytes to the browser;
    good = np.isfinite(grid) & (grid > 0)  # a colour and a 2-decimal hover need no more
    out[good] = np.log10(grid[good])
    return out


def ratio(update: Any, param: Any) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Cell-wise ‖Δθ‖ / ‖θ‖ (NaN/Inf carried; 0/0 is 0: a tensor that did not move), of two
    grids (arrays, or rows of API values: see ``values.grid``), over the cells both have."""
    u, p = grid(update), grid(param)
    rows = min(len(u), len(p))
    if not rows:
        return np.zeros((0, 0))
    cols = min(u.shape[1], p.shape[1])
    u, p = u[:rows, :cols], p[:rows, :cols]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = u / p
    out[p == 0] = np.where(u[p == 0] == 0, 0.0, math.inf)
    bad_u, bad_p = ~np.isfinite(u), ~np.isfinite(p)
    out[bad_p] = p[bad_p]
    out[bad_u] = u[bad_u]  # a non-finite update is what is shown, else the parameter's value
    return out


def nonfinite_figure(
    steps: Sequence[int],
    counts: Sequence[int],
    loss_bad: Sequence[int],
    *,
    first: tuple[int, str | None] | None,
) -> go.Figure:
    """How many tensors had non-finite gradients per column, non-finite losses, first bad step."""
    title = "Non-finite timeline"
    if not steps:
        return empty(title, "no steps recorded yet")
    if first is None and not loss_bad and not any(counts):
        return empty(title, "No NaN or Inf in any loss or gradient.", height=120)
    fig = base(title, 240)
    fig.add_trace(
        go.Bar(
            x=list(steps),
            y=list(counts),
            name="NaN/Inf gradients",
            marker={"color": "#d62728"},
            hovertemplate="from step %{x}: %{y} tensors<extra></extra>",
        )
    )
    if loss_bad:
        fig.add_trace(
            go.Scatter(
                x=list(loss_bad),
                y=[0] * len(loss_bad),
                mode="markers",
                name="non-finite loss",
                marker={"symbol": "x", "size": 9, "color": "#111"},
                hovertemplate="step %{x}: the loss is NaN or Inf<extra></extra>",
                cliponaxis=False,
            )
        )
    fig.update_yaxes(title_text="tensors", rangemode="tozero")
    fig.update_xaxes(title_text="step", range=[steps[0] - 0.5, max(steps[-1], steps[0] + 1) + 0.5])
    fig.update_layout(showlegend=True, legend=LEGEND)
    if first is not None:
        step, tensor = first
        mark_step(fig, step, f"first non-finite: step {step}" + (f", {tensor}" if tensor else ""))
    return fig


LANES = ["backward", "zero_grad", "grad_modified", "step", "skipped", "dropped"]
LANE_STYLE = {
    "backward": ("circle", "#1f77b4"),
    "zero_grad": ("square", "#2ca02c"),
    "grad_modified": ("diamond", "#9467bd"),
    "step": ("triangle-right", "#111"),
    "skipped": ("x", "#d62728"),
    "dropped": ("star", "#ff7f0e"),
}


EMPTY_LANE = {
    "zero_grad": "no zero_grad in these steps: gradients pile up (the evidence of stale gradients)",
    "grad_modified": "no gradient edited between backward and step",
    "skipped": "no step skipped",
    "dropped": "no events dropped",
    "backward": "no backward in these steps",
    "step": "no optimizer step in these steps",
}


def lifecycle_figure(
    rows: Sequence[dict[str, Any]], anomalies: dict[int, list[str]], *, focus: int | None = None
) -> go.Figure:
    """Events per step in order, one lane per kind: step N's events spread over N − ⅓ …
    N + ⅓ (so the tick N sits among them); an empty lane says in words what its emptiness
    means. Steps with a lifecycle finding get a red band and the check ids on hover."""
    title = "Optimizer lifecycle"
    if not rows:
        return empty(title, "no steps recorded yet")
    fig = base(title, 280)
    empty_lanes = []
    for lane in LANES:
        xs, texts = [], []
        for row in rows:
            events = row.get("events") or []
            for i, event in enumerate(events):
                if event and event[0] == lane:
                    xs.append(row["step"] - 1 / 3 + (2 / 3) * (i + 1) / (len(events) + 1))
                    detail = event[2] if len(event) > 2 else ""
                    texts.append(label(f"step {row['step']}: {lane} {detail}"))
        if xs:
            symbol, color = LANE_STYLE[lane]
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[lane] * len(xs),
                    mode="markers",
                    name=lane,
                    text=texts,
                    hovertemplate="%{text}<extra></extra>",
                    marker={"symbol": symbol, "color": color, "size": 8},
                )
            )
        else:
            empty_lanes.append(lane)
    shown = sorted(int(r["step"]) for r in rows)
    if not fig.data:
        fig.add_annotation(
            text="no lifecycle events recorded in these steps",
            showarrow=False,
            x=0.5,
            y=0.5,
            xref="paper",
            yref="paper",
        )
    else:
        for lane in empty_lanes:  # an empty lane is evidence too: said, not left blank
            fig.add_trace(
                go.Scatter(
                    x=[shown[0], shown[-1]],
                    y=[lane, lane],
                    mode="lines",
                    line={"color": "#d0d4d9", "width": 1, "dash": "dot"},
                    name=f"{lane}: none",
                    hoverinfo="skip",
                )
            )
            fig.add_annotation(
                text=label(EMPTY_LANE.get(lane, f"no {lane}")),
                x=0.01,
                xref="paper",
                y=lane,
                showarrow=False,
                xanchor="left",
                font={"size": 10, "color": "#6a737d"},
                bgcolor="rgba(255,255,255,0.8)",
            )
    flagged = [(step, checks) for step, checks in sorted(anomalies.items()) if step in set(shown)]
    for step, _ in flagged:
        fig.add_vrect(x0=step - 0.5, x1=step + 0.5, fillcolor="#d62728", opacity=0.15, line_width=0)
    if flagged:
        fig.add_trace(
            go.Scatter(
                x=[step for step, _ in flagged],
                y=["step"] * len(flagged),
                text=[label(", ".join(checks)) for _, checks in flagged],
                mode="markers",
                name="finding",
                marker={"symbol": "circle-open", "size": 16, "color": "#d62728"},
                hovertemplate="step %{x}: %{text}<extra></extra>",
            )
        )
    fig.update_yaxes(
        type="category", categoryorder="array", categoryarray=LANES[::-1], tickformat=""
    )
    fig.update_layout(margin={"l": 100}, showlegend=True, legend=LEGEND)
    fig.update_xaxes(
        title_text="step (events in order within each step)",
        range=[shown[0] - 0.5, shown[-1] + 0.5],
    )
    mark_step(fig, focus, f"step {focus}", "#555")
    return fig


COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf")
UNGROUPED = "metrics"  # the group of keys logged without a ``prefix/``


def metric_group(key: str) -> str:
    """The chart a user metric is drawn in: its prefix up to the first ``/`` (``train/loss``
    → ``train``), ``metrics`` for a key without one."""
    return key.split("/", 1)[0] if "/" in key.strip("/") else UNGROUPED


def user_metrics(
    series: Sequence[tuple[str, Sequence[int], Sequence[float]]],
    *,
    focus: int | None = None,
    before: int | None = None,
) -> list[tuple[str, go.Figure]]:
    """The scalars a run logged with ``run.log`` against step, one chart per prefix (in the
    order the keys were first logged), every line and mark named in the chart's legend."""
    groups: dict[str, list[tuple[str, Sequence[int], Sequence[float]]]] = {}
    for key, steps, values in series:
        groups.setdefault(metric_group(key), []).append((key, steps, values))
    out = []
    for group, members in groups.items():
        fig = base(group if group == UNGROUPED else f"{group}/…", 280)
        ref = [v for _, steps, values in members for v in reference_values(steps, values, before)]
        kind = scale([ref])
        lo, hi = value_range(ref, kind)
        for i, (key, steps, values) in enumerate(members):
            short = key[len(group) + 1 :] if group != UNGROUPED else key
            shown = [v if math.isfinite(v) and lo <= v <= hi else None for v in values]
            mode = "lines+markers" if len(steps) <= 30 else "lines"
            color = COLORS[i % len(COLORS)]
            fig.add_trace(line(steps, shown, short or key, mode=mode, line={"color": color}))
            for trace in off_scale(steps, values, (lo, hi), short or key, color):
                fig.add_trace(trace)
            for trace in nonfinite_markers(steps, values, hi, cliponaxis=False):
                trace.name = f"{short or key}: {trace.name}"
                fig.add_trace(trace)
        axis_range = [math.log10(lo), math.log10(hi)] if kind == "log" else [lo, hi]
        fig.update_yaxes(type=kind, range=axis_range)
        fig.update_layout(showlegend=True, legend=LEGEND)
        fig.update_xaxes(title_text="step")
        mark_step(fig, focus, f"step {focus}", "#555")
        out.append((group, fig))
    return out


def warm_up() -> None:
    """Build one small figure of each kind the run page draws and convert it as it is sent
    (``Figure.to_dict``). Plotly builds a property's validator on its first use, about
    0.2 s of CPU in a fresh process, which the first page drawn after the server started
    would otherwise pay; ``dash_app.create_dash`` runs this in a background thread."""
    steps, values = [1, 2, 3], [1.0, math.nan, math.inf]
    grid = [[1.0, math.nan, 2.0], [0.5, 1.0, math.inf]]
    events = [{"step": 1, "events": [["backward", 0, ""], ["step", 0, ""]]}]
    drawn = [
        loss_figure((steps, values), [("lr", steps, [0.1, 0.1, 0.1])], focus=2, before=2),
        tensor_heatmap(["a", "b"], steps, grid, title="t", unit="u", focus=2),
        nonfinite_figure(steps, [0, 1, 0], [2], first=(2, "a")),
        lifecycle_figure(events, {1: ["check"]}, focus=1),
        *(fig for _, fig in user_metrics([("train/loss", steps, values)], focus=2)),
        empty("t", "nothing"),
    ]
    for fig in drawn:
        fig.update_xaxes(range=[0.5, 3.5], autorange=False)
        fig.update_layout(margin={"l": 10, "r": 10})
        fig.to_dict()
