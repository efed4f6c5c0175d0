"""``/``: every run with project, name, live status, steps, health badge and replicate group."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from dash import Dash, Input, Output, dcc, html

from gradwatch.core.jobs import by_job
from gradwatch_dashboard import ids
from gradwatch_dashboard.api_client import Api, ApiError, from_request
from gradwatch_dashboard.components import card, empty_state, health, status_badge, table
from gradwatch_dashboard.values import fmt, to_float

PATH = r"/"
STATUSES = ("running", "finished", "failed", "crashed", "stalled")
LIMIT = 500
#: rows the table shows at first, and how many more each "Show more" adds: the table is
#: drawn again every 2 s, and hundreds of live runs' rows (about 20 components each) kept
#: the browser busy redrawing them; Chromium's renderer stopped answering with 500
PAGE_ROWS = 50
#: the findings filter: the worst severity a run must have
FINDINGS = {"error": "with errors", "warning": "with errors or warnings"}


def layout(**_params: str) -> html.Div:
    """Filters, the table, and a 2 s refresh."""
    return html.Div(
        [
            html.H2("Runs"),
            html.Div(
                [
                    dcc.Dropdown(id=ids.RUNS_PROJECT, placeholder="all projects"),
                    dcc.Dropdown(
                        id=ids.RUNS_STATUS,
                        options=[{"label": s, "value": s} for s in STATUSES],
                        placeholder="any status",
                    ),
                    dcc.Dropdown(
                        id=ids.RUNS_FINDINGS,
                        options=[{"label": text, "value": v} for v, text in FINDINGS.items()],
                        placeholder="any findings",
                    ),
                    dcc.Input(id=ids.RUNS_SEARCH, placeholder="name contains…", debounce=True),
                ],
                className="gw-filters",
            ),
            card(
                html.Div(id=ids.RUNS_TABLE),
                html.Button(
                    f"Show {PAGE_ROWS} more",
                    id=ids.RUNS_MORE,
                    className="gw-more",
                    style={"display": "none"},
                ),
            ),
            dcc.Interval(id=ids.RUNS_TICK, interval=2000),
        ]
    )


def group_of(run: dict[str, Any]) -> str | None:
    """The replicate group key (``config_hash:code_hash``), as the drift API names it."""
    if run.get("group"):
        return str(run["group"])
    if not run.get("config_hash"):
        return None
    return f"{run['config_hash']}:{run.get('code_hash') or 'none'}"


def group_name(names: list[str], shown: int = 3) -> str:
    """A replicate group by its runs' names, oldest first: ``replicate-a, replicate-b,
    drifting`` (``+ 2 more`` past ``shown``)."""
    more = f" + {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def runs_view(
    api: Api,
    project: str | None,
    status: str | None,
    search: str | None,
    findings: str | None = None,
) -> tuple[Any, list[dict[str, str]]]:
    """The runs table (its first ``PAGE_ROWS`` rows) and the project choices."""
    content, options, _ = runs_page(api, project, status, search, PAGE_ROWS, findings)
    return content, options


def has_findings(run: dict[str, Any], worst: str | None) -> bool:
    """Whether ``run`` has a finding of severity ``worst`` or worse (any run for ``None``)."""
    counts = run.get("findings") or {}
    wanted = {"error": ("error",), "warning": ("error", "warning")}.get(worst or "", ())
    return not worst or any(counts.get(s) for s in wanted)


def runs_page(
    api: Api,
    project: str | None,
    status: str | None,
    search: str | None,
    shown: int,
    findings: str | None = None,
) -> tuple[Any, list[dict[str, str]], bool]:
    """The runs table of the first ``shown`` rows (a launch's ranks under its first, as
    in the whole table: a job of many ranks may go on past them), the project choices,
    and whether more rows are left to show."""
    try:
        reply = api.get("/runs", project=project, status=status, limit=LIMIT)
        everything = reply if not (project or status) else api.get("/runs", limit=LIMIT)
    except ApiError as e:
        return empty_state(f"Cannot list runs: {e.detail}"), [], False
    projects = sorted({r["project"] for r in everything["data"]})
    options = [{"label": p, "value": p} for p in projects]
    data = [
        r
        for r in reply["data"]
        if (not search or search.lower() in r["name"].lower()) and has_findings(r, findings)
    ]
    if not data:
        why = "No runs yet." if not reply["count"] else "No run matches these filters."
        return (
            empty_state(f"{why} Train with gradwatch (or run `gradwatch demo`).", id="runs-empty"),
            options,
            False,
        )
    members: dict[str, list[str]] = {}
    for r in reversed(everything["data"]):  # oldest first
        key = group_of(r)
        if key:
            members.setdefault(key, []).append(r["name"])
    # one launch (job) per row, its other ranks or processes in the rows under it
    ordered = [(r, i > 0) for job in by_job(data) for i, r in enumerate(job)]
    losses = final_losses(api, [r for r, _ in ordered[:shown]])
    rows = [_row(r, members, losses.get(r["id"]), member) for r, member in ordered[:shown]]
    header = [
        "project",
        "run",
        "status",
        "steps",
        "duration",
        "final loss",
        "health",
        "replicate group",
        "started",
    ]
    listed = table(header, rows, id="runs-list")
    if len(rows) >= len(data):
        return listed, options, False
    note = html.P(
        f"Showing {len(rows):,} of {len(data):,} runs, newest first; "
        "filter by project, status or name to find one.",
        className="gw-muted",
        id="runs-shown",
    )
    return html.Div([listed, note]), options, True


LOSSES: dict[tuple[str, int], float | None] = {}  # (run, steps) → last loss: read once
LOSSES_KEPT = 5000


def final_losses(api: Api, runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """Each run's loss at its last step (``None`` when it has none), asked for only where
    the run has new steps since the last ask, a few at a time."""
    wanted = [r for r in runs if r.get("steps") and (r["id"], r["steps"]) not in LOSSES]

    def last(r: dict[str, Any]) -> float | None:
        try:
            reply = api.get(
                f"/runs/{r['id']}/series", metric="loss", start=r["steps"], end=r["steps"], points=2
            )
        except ApiError:
            return None
        values: list[Any] = next((s["values"] for s in reply["data"] if s["name"] == "loss"), [])
        return to_float(values[-1]) if values else None

    if wanted:
        if len(LOSSES) > LOSSES_KEPT:
            LOSSES.clear()
        with ThreadPoolExecutor(min(8, len(wanted))) as pool:
            for r, value in zip(wanted, pool.map(last, wanted), strict=True):
                LOSSES[(r["id"], r["steps"])] = value
    return {r["id"]: LOSSES.get((r["id"], r.get("steps") or 0)) for r in runs}


def duration(r: dict[str, Any]) -> str:
    """How long the run ran (to its end, else to the last record heard): ``1 h 02 m``."""
    start, end = r.get("started"), r.get("ended") or r.get("last_seen")
    if not start or not end or end < start:
        return "—"
    if end - start < 60:
        return f"{end - start:.1f} s"
    s = int(end - start)
    if s < 3600:
        return f"{s // 60} m {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} m"


def _row(
    r: dict[str, Any],
    members: dict[str, list[str]],
    loss: float | None = None,
    member: bool = False,
) -> list[Any]:
    key = group_of(r)
    group: Any = "—"
    if key:
        names = members.get(key) or [r["name"]]
        label = group_name(names) if len(names) > 1 else "alone"
        group = (
            dcc.Link(label, href=f"/compare?group={key}", title=f"replicate group {key}")
            if len(names) > 1
            else html.Span(label, className="gw-muted", title=f"replicate group {key}")
        )
    started = (
        dt.datetime.fromtimestamp(r["started"]).strftime("%Y-%m-%d %H:%M:%S")
        if r.get("started")
        else "—"
    )
    return [
        r["project"],
        _name(r, member),
        status_badge(r["status"], r.get("findings") or {}),
        f"{r['steps']:,}",
        duration(r),
        "—" if loss is None else fmt(loss),
        health(r.get("findings") or {}),
        group,
        started,
    ]


def _name(r: dict[str, Any], member: bool) -> Any:
    """The run's link; a job's other rank or process is marked as part of the row above."""
    link = dcc.Link(r["name"], href=f"/runs/{r['id']}", className="gw-run-link")
    if not member:
        return link
    rank = [f"rank {r['rank']} "] if r.get("rank") is not None else []
    return html.Span(["└ ", *rank, link], className="gw-job-member")


def register(app: Dash) -> None:
    """The table callback (runs on load, on filter changes, "Show more" and every 2 s)."""

    @app.callback(
        Output(ids.RUNS_TABLE, "children"),
        Output(ids.RUNS_PROJECT, "options"),
        Output(ids.RUNS_MORE, "style"),
        Input(ids.RUNS_PROJECT, "value"),
        Input(ids.RUNS_STATUS, "value"),
        Input(ids.RUNS_SEARCH, "value"),
        Input(ids.RUNS_FINDINGS, "value"),
        Input(ids.RUNS_MORE, "n_clicks"),
        Input(ids.RUNS_TICK, "n_intervals"),
    )
    def _update(
        project: str | None,
        status: str | None,
        search: str | None,
        findings: str | None,
        more: int | None,
        _tick: int | None,
    ) -> tuple[Any, list[dict[str, str]], dict[str, str]]:
        shown = PAGE_ROWS * (1 + (more or 0))
        content, options, left = runs_page(from_request(), project, status, search, shown, findings)
        return content, options, {} if left else {"display": "none"}
