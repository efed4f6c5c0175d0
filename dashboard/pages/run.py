"""``/runs/<id>``: loss and learning rate, per-layer heatmaps, non-finite and lifecycle
timelines, findings linked to their steps, the fingerprint; live while the run trains.

``fetch`` asks the API for everything the page shows, in parallel and bounded (short runs
at full resolution, longer ones as overviews of at most ``COLUMNS`` columns; loss and
learning rate of at most ``POINTS`` points; a lifecycle window of ``WINDOW`` steps);
``view`` turns that into components and figures; the callback refreshes every second (or
slower when the server is slow) and redraws only when the run's step, frame or finding
counts or status changed.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html, no_update

from gradwatch.dashboard import figures, ids
from gradwatch.dashboard.api_client import Api, ApiError, from_request
from gradwatch.dashboard.components import (
    card,
    empty_state,
    findings_list,
    fingerprint_panel,
    graph,
    health,
    status_badge,
)
from gradwatch.dashboard.explain import explain, first_nonfinite, lifecycle_anomalies
from gradwatch.dashboard.values import floats, grid

PATH = r"/runs/(?P<run_id>[^/]+)"
COLUMNS = 200
FINE_VALUES = 200_000  # runs up to this many steps × tensors are drawn at full resolution
STATS = ("grad_norm", "update_norm", "param_norm", "nonfinite_grad")
POINTS = 2000
WINDOW = 120
REFRESH_MS = 1000
GRAPHS = (ids.RUN_LOSS, ids.RUN_HEATMAP, ids.RUN_RATIO, ids.RUN_NONFINITE, ids.RUN_LIFECYCLE)


def layout(run_id: str, step: str | None = None, **_params: str) -> html.Div:
    """The page skeleton; the callback fills it."""
    focus = int(step) if step and step.isdigit() else None
    return html.Div(
        [
            dcc.Store(id=ids.RUN_KEY, data={"run": run_id, "focus": focus}),
            dcc.Store(id=ids.RUN_PENDING, data="initial"),
            dcc.Store(id=ids.RUN_VERSION),
            dcc.Interval(id=ids.RUN_TICK, interval=REFRESH_MS),
            html.Div(id=ids.RUN_LIVE, className="gw-muted gw-live"),
            html.Div(warm_up(), id=ids.RUN_WARM, className="gw-offscreen"),
            html.Div(id=ids.RUN_HEADER),
            card(html.Div(id=ids.RUN_LOSS)),
            card(html.Div(id=ids.RUN_HEATMAP)),
            html.Div(
                [card(html.Div(id=ids.RUN_RATIO)), card(html.Div(id=ids.RUN_NONFINITE))],
                className="gw-grid",
            ),
            card(html.Div(id=ids.RUN_LIFECYCLE)),
            card(html.H3("Findings"), html.Div(id=ids.RUN_FINDINGS)),
            card(html.H3("Fingerprint"), html.Div(id=ids.RUN_FINGERPRINT)),
        ]
    )


def warm_up() -> dcc.Graph:
    """A tiny graph drawn off screen while the page's data are on their way: the browser
    loads Plotly and draws a heatmap, a line and bars once (its code warms up) in time it
    would otherwise wait; the first drawing removes it."""
    fig = figures.base("", 120)
    fig.add_trace(go.Heatmap(z=np.array([[1.0, np.nan], [2.0, 3.0]]), y=["a", "b"]))
    fig.add_trace(go.Scatter(x=np.arange(3), y=np.array([1.0, np.nan, 2.0]), mode="lines"))
    fig.add_trace(go.Bar(x=[1, 2], y=[1, 0]))
    return dcc.Graph(figure=fig, config={"staticPlot": True}, responsive=False)


def fetch(api: Api, run_id: str, focus: int | None) -> dict[str, Any]:
    """Everything the page shows, requested concurrently; raises ``ApiError``."""
    # the findings with the run, not after it: the lifecycle window opens at the first
    # lifecycle finding, and a live page should not wait one more round trip for that
    with ThreadPoolExecutor(2) as pool:
        asked = pool.submit(api.get, f"/runs/{run_id}/findings", limit=1000)
        detail = api.get(f"/runs/{run_id}")
        findings = asked.result()
    last = int(detail["steps"])
    start = lifecycle_start(last, focus, lifecycle_anomalies(findings["data"]))
    tensors = tensor_names(detail)
    fine = 0 < last * len(tensors) <= FINE_VALUES
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "series": (f"/runs/{run_id}/series", {"metric": ["loss", "lr"], "points": POINTS}),
        "lifecycle": (f"/runs/{run_id}/lifecycle", {"start": start, "limit": WINDOW}),
    }
    if fine:
        calls |= {
            s: (f"/runs/{run_id}/series", {"tensor": tensors, "stat": s, "points": last + 1})
            for s in STATS
        }
    else:  # the four statistics in one reply, as bytes (no JSON number per cell)
        overview = {"stat": STATS[0], "also": list(STATS[1:]), "points": COLUMNS}
        calls["overview"] = (
            f"/runs/{run_id}/overview",
            {**overview, "loss": "false", "encoding": "base64"},
        )
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {k: pool.submit(api.get, path, **params) for k, (path, params) in calls.items()}
        data = {k: f.result() for k, f in futures.items()}
    problems = sorted({p for reply in data.values() for p in reply.get("problems") or []})
    data["problems"] = problems
    if fine:
        data |= {s: as_grid(data[s]["data"]) for s in STATS}
    else:
        data |= split(data.pop("overview"))
    return {"detail": detail, "focus": focus, "findings": findings, **data}


def split(overview: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The overview's statistics, each as ``{"tensors", "steps", "values"}`` (an array)."""
    grids = {overview["stat"]: overview["values"], **(overview.get("also") or {})}
    return {
        s: {"tensors": overview["tensors"], "steps": overview["steps"], "values": grid(v)}
        for s, v in grids.items()
    }


def lifecycle_start(last: int, focus: int | None, anomalies: dict[int, list[str]]) -> int:
    """The first step of the lifecycle window: around the focused step, else a few steps
    before the first lifecycle finding, else the last ``WINDOW`` steps."""
    if focus is not None:
        return max(focus - WINDOW // 2, 0)
    if anomalies:
        return max(min(anomalies) - 3, 0)
    return max(last - WINDOW + 1, 0)


def tensor_names(detail: dict[str, Any]) -> list[str]:
    """The watched tensors' names from the run's start record (what is readable of it)."""
    tensors = (detail.get("start") or {}).get("tensors")
    if not isinstance(tensors, list):
        return []
    return [str(t.get("name")) for t in tensors if isinstance(t, dict)]


def as_grid(series: list[dict[str, Any]]) -> dict[str, Any]:
    """Full-resolution tensor series (all on the same steps) in ``split``'s shape."""
    if not series or not series[0]["steps"]:
        return {"tensors": [], "steps": [], "values": np.zeros((0, 0))}
    return {
        "tensors": [s["name"] for s in series],
        "steps": series[0]["steps"],
        "values": grid([s["values"] for s in series]),
    }


def version(detail: dict[str, Any]) -> list[Any]:
    """What changes when a run gets new data (steps, frames, findings, status)."""
    counts = detail.get("findings") or {}
    return [
        detail["steps"],
        detail["frames"],
        [[k, v] for k, v in sorted(counts.items())],
        detail["status"],
    ]


def view(data: dict[str, Any]) -> dict[str, Any]:
    """Header, figures, findings and fingerprint from what ``fetch`` returned."""
    detail, focus = data["detail"], data["focus"]
    findings = data["findings"]["data"]
    ov = data["grad_norm"]
    tensors, steps = ov["tensors"], ov["steps"]
    series = data["series"]["data"]
    loss = next((s for s in series if s["name"] == "loss"), None)
    loss_xy = (loss["steps"], floats(loss["values"])) if loss else None
    lrs = [(s["name"], s["steps"], floats(s["values"])) for s in series if s["name"] != "loss"]
    counts = bad_counts(data["nonfinite_grad"]["values"], len(steps))
    loss_bad = (
        [s for s, v in zip(*loss_xy, strict=True) if v != v or abs(v) == float("inf")]
        if (loss_xy)
        else []
    )
    first = first_nonfinite(findings, data["nonfinite_grad"], loss_xy)
    ratio = figures.ratio(data["update_norm"]["values"], data["param_norm"]["values"])
    return {
        ids.RUN_HEADER: header(detail, findings, first, data.get("problems") or []),
        ids.RUN_LOSS: figures.loss_figure(loss_xy, lrs, focus=focus),
        ids.RUN_HEATMAP: figures.tensor_heatmap(
            tensors,
            steps,
            ov["values"],
            focus=focus,
            unit="‖g‖",
            title="Gradient norm per tensor",
        ),
        ids.RUN_RATIO: figures.empty(
            "Update ratio ‖Δθ‖/‖θ‖ per tensor",
            "not recorded: this run measured gradient norms only (stats='grad-norms')",
        )
        if grads_only(detail)
        else figures.tensor_heatmap(
            data["update_norm"]["tensors"],
            data["update_norm"]["steps"],
            ratio,
            focus=focus,
            unit="‖Δθ‖/‖θ‖",
            title="Update ratio ‖Δθ‖/‖θ‖ per tensor",
        ),
        ids.RUN_NONFINITE: figures.nonfinite_figure(steps, counts, loss_bad, first=first),
        ids.RUN_LIFECYCLE: figures.lifecycle_figure(
            data["lifecycle"]["data"], lifecycle_anomalies(findings), focus=focus
        ),
        ids.RUN_FINDINGS: findings_list(detail["id"], findings),
        ids.RUN_FINGERPRINT: fingerprint_panel(detail.get("fingerprint") or {}),
    }


def grads_only(detail: dict[str, Any]) -> bool:
    """Whether the run recorded gradient norms only (``watch(stats="grad-norms")``)."""
    options = (detail.get("start") or {}).get("options")
    return isinstance(options, dict) and options.get("stats") == "grad-norms"


def bad_counts(values: np.ndarray[Any, Any], columns: int) -> list[int]:
    """Per column, how many tensors had a non-finite gradient there: a cell of the
    ``nonfinite_grad`` grid that is not 0 (NaN counts too, as does any positive count)."""
    cells = grid(values)[:, :columns]
    counts = (cells != 0).sum(axis=0).tolist()  # NaN != 0
    return [int(c) for c in counts] + [0] * (columns - len(counts))


def header(
    detail: dict[str, Any],
    findings: list[dict[str, Any]],
    first: tuple[int, str | None] | None,
    problems: list[str] = [],  # noqa: B006  (never mutated)
) -> html.Div:
    """Name, status, steps, health, what went wrong in words, and what cannot be read."""
    lines = explain(findings, first)
    broken = [html.Li(f"Not shown, stored damaged: {p}") for p in problems]
    return card(
        html.H2(
            [
                detail["name"],
                " ",
                status_badge(detail["status"], detail.get("findings") or {}),
                " ",
                health(detail.get("findings") or {}),
            ],
            id="run-title",
        ),
        html.Div(
            f"project {detail['project']} · {detail['steps']:,} steps · run {detail['id']} · "
            f"{len(tensor_names(detail))} tensors",
            className="gw-muted",
        ),
        html.Ul([html.Li(line) for line in lines], className="gw-explain", id="run-explain"),
        html.Div(evidence(detail["id"], findings, first), id="run-evidence"),
        html.Ul(broken, className="gw-problems", id="run-problems") if broken else None,
    )


def evidence(
    run_id: str, findings: list[dict[str, Any]], first: tuple[int, str | None] | None
) -> list[Any]:
    """Links from the summary to its evidence: every chart focused on the first bad step,
    and a drifting run's comparison with its replicate."""
    steps = [first[0]] if first is not None else []
    steps += sorted(int(f["step"]) for f in findings if f.get("step") is not None)[:1]
    links: list[Any] = [
        dcc.Link(f"see step {step} in every chart", href=f"/runs/{run_id}?step={step}")
        for step in sorted(set(steps))
    ]
    for f in findings:
        reference = (f.get("details") or {}).get("reference")
        if f["check"] == "repro-drift" and reference:
            href = f"/compare?runs={reference},{run_id}"
            links.append(dcc.Link("compare with its replicate", href=href))
    return [part for link in links for part in (link, " · ")][:-1]


def register(app: Dash) -> None:
    """Two callbacks: ``poll`` (cheap, every second) asks for a redraw when the run changed
    and the previous redraw has landed; ``draw`` (the whole page) answers it. So at most
    one redraw is in flight: Dash drops the answer of a callback whose input changes while
    it runs, and a redraw slower than the poll period would otherwise never land."""
    outputs = [ids.RUN_HEADER, *GRAPHS, ids.RUN_FINDINGS, ids.RUN_FINGERPRINT]

    @app.callback(
        Output(ids.RUN_PENDING, "data"),
        Output(ids.RUN_LIVE, "children"),
        Output(ids.RUN_TICK, "disabled"),
        Input(ids.RUN_TICK, "n_intervals"),
        State(ids.RUN_KEY, "data"),
        State(ids.RUN_PENDING, "data"),
        State(ids.RUN_VERSION, "data"),
        prevent_initial_call=True,  # else Dash holds the first drawing until a poll changes
    )
    def _poll(_tick: int | None, key: dict[str, Any], pending: Any, drawn: Any) -> list[Any]:
        return poll(from_request(), key, pending, drawn)

    @app.callback(
        [Output(i, "children") for i in outputs]
        + [Output(ids.RUN_VERSION, "data"), Output(ids.RUN_WARM, "children")],
        Input(ids.RUN_PENDING, "data"),
        State(ids.RUN_KEY, "data"),
    )
    def _draw(pending: Any, key: dict[str, Any]) -> list[Any]:
        return [*draw(from_request(), key, pending, outputs), None]  # the warm-up goes


def poll(api: Api, key: dict[str, Any], pending: Any, drawn: Any) -> list[Any]:
    """``[new pending token or no_update, live line, interval disabled]``."""
    try:
        detail = api.get(f"/runs/{key['run']}")
    except ApiError:
        return [no_update, "", True]
    now, live = version(detail), detail["status"] == "running"
    line = live_line(detail)
    if not drawn or drawn.get("token") != pending or now == drawn.get("version"):
        return [no_update, line, not live and bool(drawn)]
    return [now, line, not live]


def live_line(detail: dict[str, Any]) -> str:
    """``running · 1,234 steps · last heard 0.4 s ago``."""
    seen = detail.get("last_seen")
    ago = f" · last heard {max(time.time() - seen, 0):.1f} s ago" if seen else ""
    return f"{detail['status']} · {detail['steps']:,} steps{ago}"


def draw(api: Api, key: dict[str, Any], pending: Any, outputs: list[str]) -> list[Any]:
    """The whole page, and ``{token, version}`` of what it drew. The graphs come with their
    figures (the layout holds none): a graph in the layout would be drawn empty first,
    then again with the data, which cost the browser a Plotly drawing of every chart
    (the first, before its code is warm, the slowest) on the way to the page."""
    try:
        data = fetch(api, key["run"], key.get("focus"))
    except ApiError as e:
        missing = empty_state(f"Cannot show run {key['run']}: {e.detail}", id="run-missing")
        return [missing] + [None] * len(GRAPHS) + ["", "", None]
    parts = view(data)
    drawn = [graph(f"{i}-graph", parts[i]) if i in GRAPHS else parts[i] for i in outputs]
    return [*drawn, {"token": pending, "version": version(data["detail"])}]
