"""A run's structure timeline (run page) and a replicate group's invariants (compare page),
from ``GET /api/v1/runs/{id}/structure`` and ``GET /api/v1/groups/{key}/structure``.

The timeline is a chart on the page's step axis, one lane per element that changed (the
lifecycle, which tensors receive gradients, the modules in ``eval()``, the param groups'
hyperparameters and the other state, the group's invariants), each change a mark at its
step, warnings (a safeguard dropped, a group invariant broken) in red; under it every
change as its sentence with its step linked. The group view lists what held in every good
run of the group and, in a table, which invariant each run breaks and from which step.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from dash import dcc, html

from gradwatch.core import checkids
from gradwatch_dashboard.api_client import Api, ApiError
from gradwatch_dashboard.components import badge, empty_state, graph, table
from gradwatch_dashboard.figures import base, label

LIMIT = 200  # changes shown on the run page (the API's page)
STRUCTURE = "run-structure-panel"  # the run page's panel (in the ids.RUN_STRUCTURE slot)
GRAPH = "run-structure-graph"
LIST = "run-structure-list"
INVARIANTS = "cmp-invariants"
BREAKS = "cmp-breaks"
LANES = {
    "lifecycle": "lifecycle",
    "grads": "gradients",
    "modes": "train/eval",
    "state": "state",  # hyperparameters, dtypes, schedulers, GradScaler
    "group": "group invariant",
}
COLOR = {"warning": "#d62728", "error": "#d62728", "info": "#1f77b4"}
SYMBOL = {"warning": "triangle-up", "error": "x", "info": "circle"}


def fetch(api: Api, run_id: str) -> dict[str, Any]:
    """The run's structure findings (the first ``LIMIT``); a server without the route
    gives ``{"missing": why}``."""
    try:
        reply: dict[str, Any] = api.get(f"/runs/{run_id}/structure", limit=LIMIT)
    except ApiError as e:
        return {"data": [], "count": 0, "missing": e.detail}
    return reply


def lane(finding: dict[str, Any]) -> str:
    """The lane of one structure finding."""
    if finding.get("check") == checkids.GROUP_INVARIANT:
        return LANES["group"]
    element = str((finding.get("details") or {}).get("element") or "state")
    return LANES.get(element, LANES["state"])


def wrap(text: str, width: int = 90) -> str:
    """``text`` broken into lines of about ``width`` characters for a hover label."""
    lines: list[str] = []
    for word in label(text).split():
        if lines and len(lines[-1]) + len(word) < width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def figure(found: list[dict[str, Any]], window: list[float] | None) -> go.Figure:
    """The timeline chart: a mark per change at its step, one lane per element."""
    lanes = [name for name in LANES.values() if any(lane(f) == name for f in found)]
    fig = base("Structure: what changed at which step", 90 + 34 * len(lanes))
    for severity in ("info", "warning", "error"):
        picked = [f for f in found if f.get("severity") == severity and f.get("step") is not None]
        if not picked:
            continue
        fig.add_trace(
            go.Scatter(
                x=[int(f["step"]) for f in picked],
                y=[lane(f) for f in picked],
                mode="markers",
                name=severity,
                marker={"size": 13, "color": COLOR[severity], "symbol": SYMBOL[severity]},
                text=[f"step {int(f['step']):,}<br>{wrap(f['message'])}" for f in picked],
                hovertemplate="%{text}<extra></extra>",
            )
        )
    for f in found:
        if f.get("severity") != "info" and f.get("step") is not None:
            fig.add_vline(x=int(f["step"]), line={"dash": "dot", "color": "#d62728", "width": 1})
    fig.update_yaxes(categoryorder="array", categoryarray=lanes[::-1], type="category")
    fig.update_xaxes(title_text="step")
    if window is not None:
        fig.update_xaxes(range=window, autorange=False)
    return fig


def sentences(run_id: str, found: list[dict[str, Any]]) -> html.Ol:
    """Every change as its sentence, its step linked to the page focused on it."""
    items = []
    for f in found:
        step = f.get("step")
        link = (
            dcc.Link(f"step {int(step):,}", href=f"/runs/{run_id}?step={int(step)}")
            if step is not None
            else "whole run"
        )
        marks: dict[str, Any] = {"data-step": str(step), "data-check": str(f.get("check"))}
        severity = str(f["severity"])
        items.append(html.Li([link, " ", badge(severity, severity), " ", f["message"]], **marks))
    return html.Ol(items, id=LIST, className="gw-structure")


def panel(
    run_id: str, reply: dict[str, Any] | None, window: list[float] | None, margin: dict[str, int]
) -> html.Div:
    """The run page's structure panel: the timeline chart on the page's step axis (with
    its ``margin``, so step N lines up) and the sentences under it."""
    reply = reply or {"data": [], "count": 0}
    found = list(reply.get("data") or [])
    if reply.get("missing"):
        return html.Div(
            empty_state(f"Structure timeline: not served by this server ({reply['missing']})."),
            id=STRUCTURE,
        )
    if not found:
        return html.Div(
            empty_state(
                "Structure: no change. Every step had the same lifecycle, the same tensors "
                "received gradients, and the modes and hyperparameters held."
            ),
            id=STRUCTURE,
        )
    fig = figure(found, window)
    fig.update_layout(margin=margin)
    notes = []
    if int(reply.get("count") or 0) > len(found):
        notes.append(f"The first {len(found):,} of {int(reply['count']):,} changes are shown.")
    if reply.get("truncated"):
        notes.append(f"Only the first {int(reply.get('steps_read') or 0):,} steps were read.")
    return html.Div(
        [
            graph(GRAPH, fig),
            sentences(run_id, found),
            html.Div(" ".join(notes), className="gw-muted") if notes else None,
        ],
        id=STRUCTURE,
    )


# ---- the compare page: a group's invariants -------------------------------------------


def group_key(group: str | None, details: dict[str, dict[str, Any]]) -> str | None:
    """The group compared: the one picked, else the one all the picked runs share."""
    if group:
        return group
    keys = {d.get("group") for d in details.values()}
    return str(next(iter(keys))) if len(keys) == 1 and None not in keys else None


def group_view(api: Api, key: str | None, chosen: list[str]) -> html.Div:
    """The group's invariants and, for each run, which one it breaks (from which step)."""
    if key is None:
        return html.Div(
            empty_state("Group invariants: the runs compared are not one replicate group."),
            id="cmp-structure",
        )
    try:
        reply = api.get(f"/groups/{key}/structure")
    except ApiError as e:
        return html.Div(empty_state(f"Group invariants: {e.detail}"), id="cmp-structure")
    teachers = ", ".join(reply.get("learned_from_names") or [])
    if reply.get("invariants"):
        head = html.P(
            f"What held on every step of {teachers} (finished with no error finding, "
            "breaking none):"
        )
        held = html.Ul([html.Li(i["text"]) for i in reply["invariants"]], id=INVARIANTS)
    else:
        head = html.P(f"No invariants learned: {reply.get('why_none')}.")
        held = html.Ul([], id=INVARIANTS)
    rows = []
    for r in reply.get("runs") or []:
        name = dcc.Link(r["name"], href=f"/runs/{r['id']}", title=r["id"])
        if r.get("learned_from"):
            role = "taught the invariants"
            if r.get("not_checked"):
                role += f"; not checked itself: {r['not_checked']}"
        elif r.get("not_checked"):
            role = f"not checked: {r['not_checked']}"
        else:
            role = "checked against the others"
        if r.get("breaks"):
            broken: Any = html.Ul(
                [
                    html.Li(
                        [
                            badge("warning", "warning"),
                            " ",
                            html.B(b["invariant"]),
                            f" from step {int(b['step']):,}: {b['message']}",
                        ]
                    )
                    for b in r["breaks"]
                ],
                className="gw-breaks",
            )
        else:
            broken = "none" if not r.get("not_checked") else "—"
        marked = html.Span([name, " (compared)" if r["id"] in chosen else ""])
        rows.append([marked, role, broken])
    return html.Div(
        [
            head,
            held,
            table(["run", "role", "invariants it breaks"], rows, id=BREAKS),
            html.Div(
                f"{reply['not_read']} older runs of the group were not read.",
                className="gw-muted",
            )
            if reply.get("not_read")
            else None,
        ],
        id="cmp-structure",
    )
