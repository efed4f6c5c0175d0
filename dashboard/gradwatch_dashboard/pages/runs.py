"""``/``: every run with project, name, live status, steps, health badge and replicate group."""

from __future__ import annotations

import datetime as dt
from typing import Any

from dash import Dash, Input, Output, dcc, html

from gradwatch.transport.jobs import by_job
from gradwatch_dashboard import ids
from gradwatch_dashboard.api_client import Api, ApiError, from_request
from gradwatch_dashboard.components import card, empty_state, health, status_badge, table

PATH = r"/"
STATUSES = ("running", "finished", "failed", "crashed", "stalled")
LIMIT = 500
#: rows the table shows at first, and how many more each "Show more" adds: the table is
#: drawn again every 2 s, and hundreds of live runs' rows (about 20 components each) kept
#: the browser busy redrawing them; Chromium's renderer stopped answering with 500
PAGE_ROWS = 50


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
    api: Api, project: str | None, status: str | None, search: str | None
) -> tuple[Any, list[dict[str, str]]]:
    """The runs table (its first ``PAGE_ROWS`` rows) and the project choices."""
    content, options, _ = runs_page(api, project, status, search, PAGE_ROWS)
    return content, options


def runs_page(
    api: Api, project: str | None, status: str | None, search: str | None, shown: int
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
    data = [r for r in reply["data"] if not search or search.lower() in r["name"].lower()]
    if not data:
        why = "No runs yet." if not reply["count"] else "No run matches these filters."
        return (
            empty_state(f"{why} Train with gradwatch (or run `gradwatch demo`).", id="runs-empty"),
            options,
            False,
        )
    sizes: dict[str, int] = {}
    for r in everything["data"]:
        key = group_of(r)
        if key:
            sizes[key] = sizes.get(key, 0) + 1
    # one launch (job) per row, its other ranks or processes in the rows under it
    ordered = [(r, i > 0) for job in by_job(data) for i, r in enumerate(job)]
    rows = [_row(r, sizes, member) for r, member in ordered[:shown]]
    header = ["project", "run", "status", "steps", "health", "replicate group", "started"]
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
    """The table callback (runs on load, on filter changes, "Show more" and every 2 s)."""

    @app.callback(
        Output(ids.RUNS_TABLE, "children"),
        Output(ids.RUNS_PROJECT, "options"),
        Output(ids.RUNS_MORE, "style"),
        Input(ids.RUNS_PROJECT, "value"),
        Input(ids.RUNS_STATUS, "value"),
        Input(ids.RUNS_SEARCH, "value"),
        Input(ids.RUNS_MORE, "n_clicks"),
        Input(ids.RUNS_TICK, "n_intervals"),
    )
    def _update(
        project: str | None,
        status: str | None,
        search: str | None,
        more: int | None,
        _tick: int | None,
    ) -> tuple[Any, list[dict[str, str]], dict[str, str]]:
        shown = PAGE_ROWS * (1 + (more or 0))
        content, options, left = runs_page(from_request(), project, status, search, shown)
        return content, options, {} if left else {"display": "none"}
