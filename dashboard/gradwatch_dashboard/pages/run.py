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

import datetime as dt
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypedDict

import numpy as np
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, dcc, html, no_update

from gradwatch.core import checkids
from gradwatch.core.contract import status_words
from gradwatch_dashboard import figures, ids, structure_panel
from gradwatch_dashboard.api_client import Api, ApiError, from_request
from gradwatch_dashboard.components import (
    card,
    empty_state,
    findings_list,
    fingerprint_panel,
    graph,
    health,
    renamed,
    status_badge,
)
from gradwatch_dashboard.explain import explain, first_nonfinite, lifecycle_anomalies
from gradwatch_dashboard.values import floats, grid

PATH = r"/runs/(?P<run_id>[^/]+)"
COLUMNS = 200
FINE_VALUES = 200_000  # runs up to this many steps × tensors are drawn at full resolution
STATS = ("grad_norm", "update_norm", "param_norm", "nonfinite_grad")
POINTS = 2000
WINDOW = 120
REFRESH_MS = 1000
GRAPHS = (ids.RUN_LOSS, ids.RUN_HEATMAP, ids.RUN_RATIO, ids.RUN_NONFINITE, ids.RUN_LIFECYCLE)
OUTPUTS: tuple[str, ...] = (ids.RUN_HEADER, *GRAPHS, ids.RUN_METRICS, ids.RUN_FINDINGS)
OUTPUTS = (*OUTPUTS, ids.RUN_FINGERPRINT, ids.RUN_STRUCTURE)  # structure: structure_panel
MAX_SCALARS = 64  # user metrics drawn (the first logged); the API's reply budget bounds them
INITIAL = "initial"  # the pending token of the drawing the page was laid out with


class RunKey(TypedDict):
    """What the page shows, kept in the browser (``ids.RUN_KEY``): the run and the step
    in focus (``?step=N``)."""

    run: str
    focus: int | None


def layout(run_id: str, step: str | None = None, **_params: str) -> html.Div:
    """The page, drawn: in a dashboard request the router's reply carries the header, the
    figures and the findings (read ahead, ``Ahead``), so the browser draws the page from
    one round trip after Dash starts; the callbacks then only redraw a live run. Outside
    a request (nothing to read from) the skeleton, which the first poll fills."""
    focus = focus_of(step)
    key = RunKey(run=run_id, focus=focus)
    parts = first_drawing(key)
    filled = parts or {}

    def slot(i: str) -> html.Div:
        return html.Div(filled.get(i), id=i)

    return html.Div(
        [
            dcc.Store(id=ids.RUN_KEY, data=dict(key)),
            dcc.Store(id=ids.RUN_PENDING, data=INITIAL),
            dcc.Store(id=ids.RUN_VERSION, data=filled.get(ids.RUN_VERSION)),
            dcc.Interval(id=ids.RUN_TICK, interval=REFRESH_MS),
            html.Div(id=ids.RUN_LIVE, className="gw-muted gw-live"),
            slot(ids.RUN_HEADER),
            card(slot(ids.RUN_LOSS)),
            card(slot(ids.RUN_STRUCTURE)),
            slot(ids.RUN_METRICS),
            card(slot(ids.RUN_HEATMAP)),
            card(slot(ids.RUN_RATIO)),  # full width, as every panel: step N lines up
            card(slot(ids.RUN_NONFINITE)),
            card(slot(ids.RUN_LIFECYCLE)),
            card(html.H3("Findings"), slot(ids.RUN_FINDINGS)),
            card(html.H3("Config"), slot(ids.RUN_FINGERPRINT)),
        ]
    )


def fetch(
    api: Api, run_id: str, focus: int | None, detail: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Everything the page shows, requested concurrently (``detail``: the run's, when it
    was just read); raises ``ApiError``."""
    # the findings with the run, not after it: the lifecycle window opens at the first
    # lifecycle finding, and a live page should not wait one more round trip for that
    with ThreadPoolExecutor(4) as pool:
        shaped = pool.submit(structure_panel.fetch, api, run_id)
        asked = pool.submit(api.get, f"/runs/{run_id}/findings", limit=1000)
        logged = pool.submit(api.get, f"/runs/{run_id}/scalars")
        detail = detail if detail is not None else api.get(f"/runs/{run_id}")
        findings = asked.result()
        keys = [str(k) for k in logged.result()["data"]][:MAX_SCALARS]
    findings["names"] = referenced(api, findings["data"])
    last = int(detail["steps"])
    start = lifecycle_start(
        last, focus, lifecycle_anomalies(findings["data"]), first_step(findings["data"])
    )
    tensors = tensor_names(detail)
    fine = 0 < last * len(tensors) <= FINE_VALUES
    calls: dict[str, tuple[str, dict[str, Any]]] = {
        "series": (f"/runs/{run_id}/series", {"metric": ["loss", "lr"], "points": POINTS}),
        "lifecycle": (f"/runs/{run_id}/lifecycle", {"start": start, "limit": WINDOW}),
    }
    if keys:  # the user's own metrics (``run.log``)
        calls["scalars"] = (f"/runs/{run_id}/series", {"scalar": keys, "points": POINTS})
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
    data.setdefault("scalars", {"data": []})
    data["structure"] = shaped.result()
    return {"detail": detail, "focus": focus, "findings": findings, **data}


def referenced(api: Api, findings: list[dict[str, Any]]) -> dict[str, str]:
    """Run id → name of the runs the findings refer to (a drifting run's replicate), so
    that the page names them as the reader knows them."""
    refs = {
        str(f["details"]["reference"])
        for f in findings
        if isinstance(f.get("details"), dict) and f["details"].get("reference")
    }
    names = {}
    for ref in sorted(refs)[:8]:
        try:
            names[ref] = str(api.get(f"/runs/{ref}")["name"])
        except ApiError:
            continue  # a reference since deleted keeps its id
    return names


def split(overview: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The overview's statistics, each as ``{"tensors", "steps", "values"}`` (an array)."""
    grids = {overview["stat"]: overview["values"], **(overview.get("also") or {})}
    return {
        s: {"tensors": overview["tensors"], "steps": overview["steps"], "values": grid(v)}
        for s, v in grids.items()
    }


def lifecycle_start(
    last: int, focus: int | None, anomalies: dict[int, list[str]], incident: int | None = None
) -> int:
    """The first step of the lifecycle window: around the focused step, else a few steps
    before the first lifecycle finding, else before the run's first incident (what went
    wrong there), else the last ``WINDOW`` steps."""
    if focus is not None:
        return max(focus - WINDOW // 2, 0)
    if anomalies:
        return max(min(anomalies) - 3, 0)
    if incident is not None:
        return max(incident - WINDOW // 4, 0)
    return max(last - WINDOW + 1, 0)


def first_step(findings: list[dict[str, Any]]) -> int | None:
    """The step of the run's first finding with a step (its first incident)."""
    steps = [int(f["step"]) for f in findings if f.get("step") is not None]
    return min(steps) if steps else None


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
    findings = renamed(data["findings"]["data"], data["findings"].get("names") or {})
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
    before = incident_start(findings, first)
    ratio = figures.ratio(data["update_norm"]["values"], data["param_norm"]["values"])
    window = x_window(int(detail["steps"]), focus)
    return aligned(
        window,
        {
            "version": version(detail),
            ids.RUN_HEADER: header(detail, findings, first, data.get("problems") or []),
            ids.RUN_LOSS: figures.loss_figure(loss_xy, lrs, focus=focus, before=before),
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
            ids.RUN_METRICS: metrics_cards(data["scalars"]["data"], focus, before, window),
            ids.RUN_FINDINGS: findings_list(detail["id"], findings),
            ids.RUN_FINGERPRINT: fingerprint_panel(detail.get("fingerprint") or {}),
            ids.RUN_STRUCTURE: structure_panel.panel(
                detail["id"], data.get("structure"), window, MARGIN
            ),
        },
        lifecycle=focus is not None,
    )


def incident_start(
    findings: list[dict[str, Any]], first: tuple[int, str | None] | None
) -> int | None:
    """The first step of the incident that made the run's first NaN/Inf: its cause's step
    (a learning-rate jump a few steps before the loss overflowed), else that first step;
    the charts' value ranges are taken from the steps before it."""
    if first is None:
        return None
    bad = {f.get("incident") for f in findings if str(f.get("check", "")).startswith("nonfinite")}
    steps = [
        int(f["step"])
        for f in findings
        if f.get("incident") and f.get("incident") in bad and f.get("step") is not None
    ]
    return min([first[0], *steps])


ZOOM = 10  # ``?step=N`` shows at least N ± 10 steps (a twentieth of a long run each side)
MARGIN = {"l": 110, "r": 210}  # the same plot width in every panel (colour bars sit right)


def x_window(last: int, focus: int | None) -> list[float]:
    """The step range every chart of the page shows: the whole run, or around ``focus``."""
    whole = [0.5, max(last, 1) + 0.5]
    if focus is None:
        return whole
    half = max(ZOOM, last // 20)
    return [max(focus - half, 0.5), min(focus + half, whole[1])]


def aligned(window: list[float], parts: dict[str, Any], lifecycle: bool) -> dict[str, Any]:
    """``parts`` with every chart on the same step range and the same margins, so a step
    lines up down the page (the lifecycle panel keeps its own window unless focused)."""
    charts = [ids.RUN_LOSS, ids.RUN_HEATMAP, ids.RUN_RATIO, ids.RUN_NONFINITE]
    charts += [ids.RUN_LIFECYCLE] if lifecycle else []
    for key in charts:
        fix(parts[key], window)
    fix(parts[ids.RUN_LIFECYCLE], None)
    return parts


def fix(fig: Any, window: list[float] | None) -> None:
    """One chart's step range (``None``: its own) and the page's margins."""
    if window is not None:
        fig.update_xaxes(range=window, autorange=False)
    fig.update_layout(margin=MARGIN)


def metrics_cards(
    series: list[dict[str, Any]],
    focus: int | None,
    before: int | None = None,
    window: list[float] | None = None,
) -> list[html.Div]:
    """One card per group of the user's metrics (``train/…``, ``val/…``), each a chart on
    the page's step range."""
    drawn = figures.user_metrics(
        [(s["name"], s["steps"], floats(s["values"])) for s in series], focus=focus, before=before
    )
    for _, fig in drawn:
        fix(fig, window)
    return [
        card(graph(f"{ids.RUN_METRICS}-{i}", fig), **{"data-group": group})
        for i, (group, fig) in enumerate(drawn)
    ]


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
        if f["check"] == checkids.REPRO_DRIFT and reference:
            href = f"/compare?runs={reference},{run_id}"
            links.append(dcc.Link("compare with its replicate", href=href))
    return [part for link in links for part in (link, " · ")][:-1]


KEPT = 16  # drawn pages kept for their next load (the latest)


class Kept:
    """The latest ``KEPT`` drawn pages, by server, token, run and focused step, each with the
    run's detail (``GET /runs/{id}``) it was drawn from. The next load of such a page reads
    the run's detail only, and when that is the same it is drawn from here, without reading
    the run's data or building its figures again. The detail is the run's version: every
    frame stored raises its ``frames`` (and ``steps``, ``last_seen``), every finding its
    counts, an end record its status; a status that changes with time (running, then
    stalled) changes it too. So a finished run's page is read once, and a live run's page
    is drawn afresh whenever the run posted since. (What is not the run's own stays as
    drawn: the name of a replicate a drift finding refers to.)"""

    def __init__(self, size: int = KEPT) -> None:
        self._lock = threading.Lock()
        self._size = size
        self._pages: OrderedDict[tuple[Any, ...], tuple[dict[str, Any], dict[str, Any]]] = (
            OrderedDict()
        )

    def holds(self, key: tuple[Any, ...]) -> bool:
        """Whether a page is kept under ``key`` (of any detail)."""
        with self._lock:
            return key in self._pages

    def get(self, key: tuple[Any, ...], detail: dict[str, Any]) -> dict[str, Any] | None:
        """The page kept under ``key`` if it was drawn from ``detail``, else ``None``."""
        with self._lock:
            kept = self._pages.get(key)
            if kept is None or kept[0] != detail:
                return None
            self._pages.move_to_end(key)
            return kept[1]

    def put(self, key: tuple[Any, ...], detail: dict[str, Any], parts: dict[str, Any]) -> None:
        """Keep ``parts``, drawn from ``detail``, under ``key`` (in place of what was)."""
        with self._lock:
            self._pages[key] = (detail, parts)
            self._pages.move_to_end(key)
            while len(self._pages) > self._size:
                self._pages.popitem(last=False)


def build(api: Api, run_id: str, focus: int | None, kept: Kept | None = None) -> dict[str, Any]:
    """``view(fetch(...))`` with every figure in the form sent to the browser (``sent``):
    from ``kept`` when the run's detail is the one its kept page was drawn from, else read,
    drawn and kept; raises ``ApiError``."""
    key = (api.base_url, api.token, run_id, focus)
    detail = None
    if kept is not None and kept.holds(key):
        detail = api.get(f"/runs/{run_id}")
        parts = kept.get(key, detail)
        if parts is not None:
            return parts
    data = fetch(api, run_id, focus, detail)
    parts = sent(view(data))
    if kept is not None:
        kept.put(key, data["detail"], parts)
    return parts


def sent(parts: dict[str, Any]) -> dict[str, Any]:
    """``parts`` with every figure as the dict Dash sends (``Figure.to_dict``: its arrays
    as base64 typed arrays), made once: a kept page is sent without copying and converting
    its figures again. The graphs inside the other parts (the user's metrics, the
    structure timeline), built for this drawing only, get theirs in place."""
    for i in OUTPUTS:
        if i not in GRAPHS:
            for g in graphs_in(parts[i]):
                figure = getattr(g, "figure", None)  # a prop Dash sets on the instance
                if isinstance(figure, go.Figure):
                    g.figure = figure.to_dict()  # type: ignore[attr-defined]
    return parts | {i: parts[i].to_dict() for i in GRAPHS}


def graphs_in(part: Any) -> list[dcc.Graph]:
    """The ``dcc.Graph`` components in ``part`` (a component, a list of them, or text)."""
    if isinstance(part, list | tuple):
        return [g for p in part for g in graphs_in(p)]
    if isinstance(part, dcc.Graph):
        return [part]
    children = getattr(part, "children", None)
    return graphs_in(children) if children is not None else []


AHEAD_S = 10.0  # a page's data asked for ahead are used for its first drawing this long
AHEAD_MAX = 8  # pages asked for ahead at once (others are drawn as they ask)
AHEAD_KEY = "gradwatch-run-ahead"


class Ahead:
    """The run page's data, asked for as soon as the server knows the page is wanted (the
    page's HTML is requested, or the router lays the page out), so the server reads and
    builds the page while the browser starts Dash and Plotly; the page's first ``draw``
    takes them instead of asking again. Keyed by server, token, run and focused step: a
    request with another token never gets them. Taken once, and only within ``AHEAD_S``
    of asking; redraws of a live run always ask afresh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pages: dict[tuple[Any, ...], tuple[float, Future[dict[str, Any]]]] = {}
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="gradwatch-run-ahead")
        self.kept = Kept()  # the latest pages drawn, for loads of unchanged runs

    def ask(self, api: Api, run_id: str, focus: int | None) -> None:
        """Start reading the page of ``run_id`` (nothing if it is already being read)."""
        key, now = (api.base_url, api.token, run_id, focus), time.monotonic()
        with self._lock:
            for old in [k for k, (t, _) in self._pages.items() if now - t > AHEAD_S]:
                del self._pages[old]
            if key in self._pages or len(self._pages) >= AHEAD_MAX:
                return
            self._pages[key] = (now, self._pool.submit(build, api, run_id, focus, self.kept))

    def take(self, api: Api, run_id: str, focus: int | None) -> dict[str, Any]:
        """The page's parts: those asked for ahead when there are, else read now; raises
        ``ApiError`` as reading now would."""
        with self._lock:
            asked = self._pages.pop((api.base_url, api.token, run_id, focus), None)
        if asked is not None and time.monotonic() - asked[0] <= AHEAD_S:
            return asked[1].result()
        return build(api, run_id, focus, self.kept)


def first_drawing(key: RunKey) -> dict[str, Any] | None:
    """In a request of a dashboard with ``register``ed run pages: the page's first drawing
    (``drawing``, the data read ahead when they are), else ``None``."""
    import flask

    if flask.has_request_context():
        ahead = flask.current_app.extensions.get(AHEAD_KEY)
        if isinstance(ahead, Ahead):
            return drawing(from_request(), key, INITIAL, ahead)
    return None


def focus_of(step: str | None) -> int | None:
    """The focused step of ``?step=N`` (``None`` when absent or not a number)."""
    return int(step) if step and step.isdigit() else None


def register(app: Dash) -> None:
    """Two callbacks: ``poll`` (cheap, every second) asks for a redraw when the run changed
    and the previous drawing has landed; ``draw`` (the whole page) answers it. So at most
    one redraw is in flight: Dash drops the answer of a callback whose input changes while
    it runs, and a redraw slower than the poll period would otherwise never land. The
    first drawing comes with the layout (``first_drawing``); a GET of the page's HTML
    starts reading its data ahead (``Ahead``)."""
    ahead = Ahead()
    app.server.extensions[AHEAD_KEY] = ahead  # ``first_drawing`` takes from it
    import flask

    @app.server.before_request  # type: ignore[untyped-decorator]
    def _ask_ahead() -> None:
        request = flask.request
        match = re.fullmatch(PATH, request.path) if request.method == "GET" else None
        if match:
            ahead.ask(from_request(), match["run_id"], focus_of(request.args.get("step")))

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
    def _poll(_tick: int | None, key: RunKey, pending: Any, drawn: Any) -> list[Any]:
        return poll(from_request(), key, pending, drawn)

    @app.callback(
        [Output(i, "children") for i in OUTPUTS] + [Output(ids.RUN_VERSION, "data")],
        Input(ids.RUN_PENDING, "data"),
        State(ids.RUN_KEY, "data"),
        prevent_initial_call=True,  # the layout came drawn
    )
    def _draw(pending: Any, key: RunKey) -> list[Any]:
        return draw(from_request(), key, pending, list(OUTPUTS), ahead)


def poll(api: Api, key: RunKey, pending: Any, drawn: Any) -> list[Any]:
    """``[new pending token or no_update, live line, interval disabled]``; a page laid out
    without its drawing (``drawn`` is ``None``) asks for one."""
    try:
        detail = api.get(f"/runs/{key['run']}")
    except ApiError:
        return [no_update, "", True]
    now, live = version(detail), detail["status"] == "running"
    line = live_line(detail)
    if drawn is None and pending == INITIAL:
        return [now, line, False]
    if not drawn or drawn.get("token") != pending or now == drawn.get("version"):
        return [no_update, line, not live and bool(drawn)]
    return [now, line, not live]


def live_line(detail: dict[str, Any]) -> str:
    """``running · 1,234 steps · last heard 0.4 s ago``; a run that ended says when:
    ``finished at 2026-12-06 04:47:18 · 300 steps``."""
    seen, ended = detail.get("last_seen"), detail.get("ended")
    last: float | None = ended or seen
    if detail["status"] != "running" and last:
        when = dt.datetime.fromtimestamp(last).strftime("%Y-%m-%d %H:%M:%S")
        word = "at" if ended else "last heard at"
        status = status_words(detail["status"], detail.get("findings") or {})
        return f"{status} {word} {when} · {detail['steps']:,} steps"
    ago = f" · last heard {max(time.time() - seen, 0):.1f} s ago" if seen else ""
    return f"{detail['status']} · {detail['steps']:,} steps{ago}"


def draw(
    api: Api, key: RunKey, pending: Any, outputs: list[str], ahead: Ahead | None = None
) -> list[Any]:
    """The callback's reply: ``drawing``'s parts in the order of ``outputs``, then
    ``{token, version}`` of what it drew."""
    parts = drawing(api, key, pending, ahead)
    return [*(parts[i] for i in outputs), parts[ids.RUN_VERSION]]


def drawing(api: Api, key: RunKey, pending: Any, ahead: Ahead | None = None) -> dict[str, Any]:
    """The whole page by output id, and ``{token, version}`` of what it drew under
    ``ids.RUN_VERSION``. The graphs come with their figures: a graph drawn empty first,
    then again with the data, cost the browser a Plotly drawing of every chart (the first,
    before its code is warm, the slowest) on the way to the page. The first drawing
    (``pending`` is ``INITIAL``) takes the data read ahead (``Ahead``) when there are."""
    run_id, focus = key["run"], key.get("focus")
    try:
        if ahead is not None and pending == INITIAL:
            parts = ahead.take(api, run_id, focus)
        else:
            parts = build(api, run_id, focus, ahead.kept if ahead is not None else None)
    except ApiError as e:
        missing = empty_state(f"Cannot show run {run_id}: {e.detail}", id="run-missing")
        return {i: None for i in OUTPUTS} | {
            ids.RUN_HEADER: missing,
            ids.RUN_FINDINGS: "",
            ids.RUN_METRICS: None,
            ids.RUN_FINGERPRINT: "",
            ids.RUN_VERSION: None,
        }
    drawn = {i: graph(f"{i}-graph", parts[i]) if i in GRAPHS else parts[i] for i in OUTPUTS}
    return drawn | {ids.RUN_VERSION: {"token": pending, "version": parts["version"]}}
