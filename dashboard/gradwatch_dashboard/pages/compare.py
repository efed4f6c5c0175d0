"""``/compare``: pick replicates (or a group); overlaid loss with divergence steps marked,
per-tensor difference, fingerprint diff, and the verdict and cause in words.

The first selected run is the reference; each other run is compared with it through
``GET /api/v1/compare`` (the drift API). Without that API on the server the page still
overlays the curves and diffs the fingerprints, and says what is missing.
"""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, dcc, html

from gradwatch_dashboard import compare_figures as cf
from gradwatch_dashboard import ids, structure_panel
from gradwatch_dashboard.api_client import Api, ApiError, from_request
from gradwatch_dashboard.components import card, empty_state, graph
from gradwatch_dashboard.figures import empty
from gradwatch_dashboard.pages import run as run_page
from gradwatch_dashboard.pages.runs import LIMIT, group_name, group_of
from gradwatch_dashboard.values import floats, grid

PATH = r"/compare"
POINTS = 1000
MAX_RUNS = 8
COLUMNS = 200  # steps of the per-tensor difference (the overview's columns)
KEYS = (
    ids.CMP_VERDICT,
    ids.CMP_CURVES,
    ids.CMP_DIFF,
    ids.CMP_TENSORS,
    ids.CMP_FINGERPRINT,
    ids.CMP_STRUCTURE,  # the group's invariants and the runs that break them
)
FIGURES = (ids.CMP_CURVES, ids.CMP_DIFF, ids.CMP_TENSORS)
# the picked runs into the address (``?runs=a,b,c``), so that it reproduces the comparison;
# replaced, not pushed, and without telling the router (the page is already drawn)
ADDRESS_JS = """function(chosen) {
  if (!chosen || chosen.length < 2) { return window.dash_clientside.no_update; }
  const search = "?runs=" + chosen.map(encodeURIComponent).join(",");
  if (window.location.search !== search) {
    window.history.replaceState(window.history.state, "", window.location.pathname + search);
  }
  return search;
}"""


def layout(group: str | None = None, runs: str | None = None, **_params: str) -> html.Div:
    """Pickers, the verdicts, the overlay, the per-tensor heatmap and the fingerprint diff."""
    picked = [r for r in (runs or "").split(",") if r]
    return html.Div(
        [
            html.H2("Compare replicates"),
            html.Div(
                [
                    dcc.Dropdown(
                        id=ids.CMP_GROUP,
                        value=group,
                        options=[{"label": group[:12], "value": group}] if group else [],
                        placeholder="a replicate group",
                    ),
                    dcc.Dropdown(
                        id=ids.CMP_RUNS,
                        value=picked,
                        options=[{"label": r, "value": r} for r in picked],
                        multi=True,
                        placeholder="or pick runs (first = reference)",
                        style={"minWidth": "480px"},
                    ),
                ],
                className="gw-filters",
            ),
            dcc.Store(id=ids.CMP_CHOSEN),
            dcc.Store(id=ids.CMP_ADDRESS),
            card(html.Div(id=ids.CMP_VERDICT)),
            card(html.H3("Group invariants"), html.Div(id=ids.CMP_STRUCTURE)),
            card(graph(ids.CMP_CURVES)),
            card(graph(ids.CMP_DIFF)),
            card(graph(ids.CMP_TENSORS)),
            card(html.H3("Fingerprint diff"), html.Div(id=ids.CMP_FINGERPRINT)),
        ]
    )


def choices(api: Api) -> tuple[list[dict[str, str]], list[dict[str, str]], dict[str, list[str]]]:
    """Group options, run options and each group's runs (oldest first)."""
    runs = api.get("/runs", limit=LIMIT)["data"]
    members: dict[str, list[str]] = {}
    named = {r["id"]: r["name"] for r in runs}
    for r in reversed(runs):
        key = group_of(r)
        if key:
            members.setdefault(key, []).append(r["id"])
    groups = [
        {"label": f"{group_name([named[i] for i in v])} ({len(v)} runs)", "value": k}
        for k, v in members.items()
        if len(v) > 1
    ]
    options = [{"label": f"{r['name']} ({r['project']})", "value": r["id"]} for r in runs]
    return groups, options, members


def compare_view(api: Api, group: str | None, picked: list[str]) -> dict[str, Any]:
    """Everything the page shows for a group or a list of runs."""
    groups, options, members = choices(api)
    chosen = list(picked or [])
    if group and not chosen:
        chosen = members.get(group, [])
    chosen = chosen[:MAX_RUNS]
    out: dict[str, Any] = {"groups": groups, "options": options, "runs": chosen}
    if len(chosen) < 2:
        out |= {
            ids.CMP_VERDICT: empty_state("Pick a replicate group, or two or more runs."),
            ids.CMP_CURVES: cf.overlay([], []),
            ids.CMP_DIFF: empty("Loss difference", "nothing compared yet"),
            ids.CMP_TENSORS: empty("Per-tensor difference", "nothing compared yet"),
            ids.CMP_FINGERPRINT: "",
            ids.CMP_STRUCTURE: "",
        }
        return out
    details = {r: api.get(f"/runs/{r}") for r in chosen}
    names = {r: d["name"] for r, d in details.items()}
    ref, others = chosen[0], chosen[1:]
    comparisons, missing = {}, None
    for other in others:
        try:
            comparisons[other] = api.get("/compare", a=ref, b=other)
        except ApiError as e:
            missing = e.detail
            break
    curves = []
    for r in chosen:
        series = api.get(f"/runs/{r}/series", metric="loss", points=POINTS)["data"]
        s = next((x for x in series if x["name"] == "loss"), None)
        curves.append((names[r], s["steps"] if s else [], floats(s["values"]) if s else []))
    lines = [html.Li(cf.verdict_text(c, names[ref], names[o])) for o, c in comparisons.items()]
    if missing is not None:
        lines.append(html.Li(f"No drift verdict from this server ({missing})."))
    splits = loss_splits(curves) if missing is not None else []
    lines += [
        html.Li(
            f"{other}: loss identical to {names[ref]} on every shared step."
            if step is None
            else f"{other}: loss first differs from {names[ref]} at step {step}."
        )
        for other, step in splits
    ]
    marks = [(step, f"{other} splits") for other, step in splits if step is not None] + [
        (c["step"], f"{names[o]} diverges")
        for o, c in comparisons.items()
        if c.get("verdict") == "diverged" and c.get("step") is not None
    ]
    worst = next((c for c in comparisons.values() if c.get("verdict") == "diverged"), None)
    shown: dict[str, Any] = worst or next(iter(comparisons.values()), {})
    b = next((o for o, c in comparisons.items() if c is shown), None)
    if b is None:  # no drift API: the first run whose loss differs, else the second run
        b = next((o for o, (_, step) in zip(others, splits, strict=False) if step), others[0])
    listed = [d for c in comparisons.values() for d in c.get("fingerprint_diff") or []]
    out |= {
        ids.CMP_VERDICT: html.Div(
            [
                html.Div(f"Reference: {names[ref]}", className="gw-muted"),
                html.Ul(lines, className="gw-verdict"),
            ],
            id="cmp-words",
        ),
        ids.CMP_CURVES: cf.overlay(curves, marks),
        ids.CMP_DIFF: cf.loss_difference(curves[0], curves[1:]),
        ids.CMP_TENSORS: tensor_difference(api, details, ref, b, (names[ref], names[b])),
        ids.CMP_FINGERPRINT: cf.fingerprint_diff(
            [details[r].get("fingerprint") or {} for r in chosen],
            [names[r] for r in chosen],
            listed,
        ),
        ids.CMP_STRUCTURE: structure_panel.group_view(
            api, structure_panel.group_key(group, details), chosen
        ),
    }
    steps = [s for _, xs, _ in curves for s in xs]
    if steps:  # one step axis for the three charts, so a step lines up
        for key in FIGURES:
            out[key].update_xaxes(range=[min(steps) - 0.5, max(steps) + 0.5], autorange=False)
    return out


def tensor_difference(
    api: Api, details: dict[str, dict[str, Any]], ref: str, other: str, names: tuple[str, str]
) -> Any:
    """Tensors × steps of the gradient norms' relative difference between two runs: every
    step where the runs are short (as the run page reads them), else both runs' overviews
    of at most ``COLUMNS`` columns."""
    tensors = run_page.tensor_names(details[ref])
    steps = max(int(details[ref]["steps"]), int(details[other]["steps"]))
    if 0 < steps * len(tensors) <= run_page.FINE_VALUES:
        asked: dict[str, Any] = {"tensor": tensors, "stat": "grad_norm", "points": steps + 1}
        a, b = (
            run_page.as_grid(api.get(f"/runs/{r}/series", **asked)["data"]) for r in (ref, other)
        )
    else:
        asked = {"stat": "grad_norm", "points": COLUMNS, "loss": "false", "encoding": "base64"}
        a, b = (api.get(f"/runs/{r}/overview", **asked) for r in (ref, other))
    if a["tensors"] != b["tensors"] or list(a["steps"]) != list(b["steps"]):
        why = "their tensors or steps differ, so there is no cell-by-cell difference"
        return empty(f"Per-tensor difference, {names[1]} vs {names[0]}", why)
    return cf.tensor_difference(
        a["tensors"], a["steps"], grid(a["values"]), grid(b["values"]), names
    )


def loss_splits(curves: list[tuple[str, list[int], list[float]]]) -> list[tuple[str, int | None]]:
    """Without the drift API: the first step where each run's loss differs from the
    reference's (exactly, over the points both series kept), or ``None``."""
    _, steps, values = curves[0]
    ref = dict(zip(steps, values, strict=True))
    return [
        (
            other,
            next(
                (
                    s
                    for s, v in zip(o_steps, o_values, strict=True)
                    if s in ref and repr(ref[s]) != repr(v)
                ),
                None,
            ),
        )
        for other, o_steps, o_values in curves[1:]
    ]


def register(app: Dash) -> None:
    """One callback: the pickers drive everything; the runs compared go to the address."""

    @app.callback(
        [Output(ids.CMP_GROUP, "options"), Output(ids.CMP_RUNS, "options")]
        + [Output(k, "figure" if k in FIGURES else "children") for k in KEYS]
        + [Output(ids.CMP_CHOSEN, "data")],
        Input(ids.CMP_GROUP, "value"),
        Input(ids.CMP_RUNS, "value"),
    )
    def _update(group: str | None, picked: list[str] | None) -> list[Any]:
        try:
            got = compare_view(from_request(), group, picked or [])
        except ApiError as e:
            failed = empty_state(f"Cannot compare: {e.detail}")
            return [[], [], failed, empty("", ""), empty("", ""), empty("", ""), "", "", None]
        return [got["groups"], got["options"], *(got[k] for k in KEYS), got["runs"]]

    app.clientside_callback(  # type: ignore[no-untyped-call]
        ADDRESS_JS, Output(ids.CMP_ADDRESS, "data"), Input(ids.CMP_CHOSEN, "data")
    )
