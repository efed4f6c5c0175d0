"""``/``: every run with project, name, live status, steps, health badge and replicate group."""

from __future__ import annotations

import datetime as dt
from typing import Any

from dash import Dash, Input, Output, dcc, html

from gradwatch.dashboard import ids
from gradwatch.dashboard.api import Api, ApiError, from_request
from gradwatch.dashboard.components import card, empty_state, health, status_badge, table
from gradwatch.transport.jobs import by_job

PATH = r"/"
STATUSES = ("running", "finished", "failed", "crashed", "stalled")
LIMIT = 500


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
                    dcc.Input(id=ids.RUNS_SEARCH, placeholder="name contains…", debounce=True),
                ],
                className="gw-filters",
            ),
            card(html.Div(id=ids.RUNS_TABLE)),
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


def runs_view(
    api: Api, project: str | None, status: str | None, search: str | None
) -> tuple[Any, list[dict[str, str]]]:
    """The runs table and the project choices."""
    try:
        reply = api.get("/runs", project=project, status=status, limit=LIMIT)
        everything = reply if not (project or status) else api.get("/runs", limit=LIMIT)
    except ApiError as e:
        return empty_state(f"Cannot list runs: {e.detail}"), []
    projects = sorted({r["project"] for r in everything["data"]})
    options = [{"label": p, "value": p} for p in projects]
    data = [r for r in reply["data"] if not search or search.lower() in r["name"].lower()]
    if not data:
        why = "No runs yet." if not reply["count"] else "No run matches these filters."
        return empty_state(
            f"{why} Train with gradwatch (or run `gradwatch demo`).", id="runs-empty"
        ), options
    sizes: dict[str, int] = {}
    for r in everything["data"]:
        key = group_of(r)
        if key:
            sizes[key] = sizes.get(key, 0) + 1
    # one launch (job) per row, its other ranks or processes in the rows under it
    rows = [_row(r, sizes, i > 0) for job in by_job(data) for i, r in enumerate(job)]
    header = ["project", "run", "status", "steps", "health", "replicate group", "started"]
    return table(header, rows, id="runs-list"), options


def _row(r: dict[str, Any], sizes: dict[str, int], member: bool = False) -> list[Any]:
    key = group_of(r)
    group: Any = "—"
    if key:
        n = sizes.get(key, 1)
        label = f"{key.split(':')[0][:8]} · {n} run{'s' if n > 1 else ''}"
        group = dcc.Link(label, href=f"/compare?group={key}") if n > 1 else label
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
    """The table callback (runs on load, on filter changes and every 2 s)."""

    @app.callback(
        Output(ids.RUNS_TABLE, "children"),
        Output(ids.RUNS_PROJECT, "options"),
        Input(ids.RUNS_PROJECT, "value"),
        Input(ids.RUNS_STATUS, "value"),
        Input(ids.RUNS_SEARCH, "value"),
        Input(ids.RUNS_TICK, "n_intervals"),
    )
    def _update(
        project: str | None, status: str | None, search: str | None, _tick: int | None
    ) -> tuple[Any, list[dict[str, str]]]:
        return runs_view(from_request(), project, status, search)
