"""``/alerts``: alerts, webhook deliveries and alert rules (add, enable/disable, remove).

Reads and writes the alerts API (``/api/v1/alerts``, ``/alert-deliveries``,
``/alert-rules``). A server without it gets an empty state saying so.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dash import ALL, Dash, Input, Output, State, ctx, dcc, html

from gradwatch.core.contract import SEVERITIES
from gradwatch_dashboard import ids
from gradwatch_dashboard.api_client import Api, ApiError, from_request
from gradwatch_dashboard.compare_figures import deliveries_summary, rules_table
from gradwatch_dashboard.components import badge, card, empty_state, named, table

PATH = r"/alerts"
LIMIT = 200
RUNS = 500  # runs whose names the alerts are shown with (the newest)
DELETE = "rule-delete"


def layout(**_params: str) -> html.Div:
    """Alerts, deliveries, rules and the new-rule form; refreshed every 2 s."""
    form = html.Div(
        [
            dcc.Input(id=ids.RULE_PROJECT, placeholder="project"),
            dcc.Input(id=ids.RULE_CHECK, placeholder="check id (e.g. repro-drift)"),
            dcc.Dropdown(
                id=ids.RULE_SEVERITY,
                placeholder="min severity",
                options=[{"label": s, "value": s} for s in SEVERITIES],
            ),
            dcc.Input(
                id=ids.RULE_WEBHOOK,
                placeholder="webhook URL (optional)",
                style={"minWidth": "320px"},
            ),
            html.Button("Add rule", id=ids.RULE_ADD),
        ],
        className="gw-filters",
    )
    return html.Div(
        [
            html.H2("Alerts"),
            card(html.H3("Alerts"), html.Div(id=ids.ALERTS_TABLE)),
            card(html.H3("Webhook deliveries"), html.Div(id=ids.ALERTS_DELIVERIES)),
            card(
                html.H3("Rules"),
                form,
                html.Div(id=ids.RULE_MESSAGE, className="gw-muted"),
                html.Div(id=ids.ALERTS_RULES),
            ),
            dcc.Interval(id=ids.ALERTS_TICK, interval=2000),
        ]
    )


def _when(t: float | None) -> str:
    return dt.datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t else "—"


def incidents(alerts: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Alerts grouped by run and incident (one NaN incident raises an alert per finding:
    one row), newest incident first; within one, the cause first, then by step."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for a in alerts:
        key = (a["run"], a.get("incident") or f"alert {a['id']}")
        groups.setdefault(key, []).append(a)
    out = [
        sorted(
            g, key=lambda a: (a.get("role") != "cause", a.get("step") is None, a.get("step") or 0)
        )
        for g in groups.values()
    ]
    return sorted(out, key=lambda g: -max(a.get("created_at") or 0 for a in g))


def _incident_row(group: list[dict[str, Any]], names: dict[str, str]) -> list[Any]:
    """One row of an incident's alerts: when, which run (by name), the worst severity, its
    checks (the cause's first), the cause's step, its sentence, the deliveries summed."""
    cause = group[0]
    worst = next((s for s in SEVERITIES[::-1] if any(a["severity"] == s for a in group)), "info")
    checks = list(dict.fromkeys(a["check"] for a in group))
    step = cause.get("step")
    sentence = named(str(cause.get("summary") or cause["message"]), names)
    counts: dict[str, int] = {}
    for a in group:
        for k, n in (a.get("deliveries") or {}).items():
            counts[k] = counts.get(k, 0) + int(n)
    more = f" ({len(group)} findings)" if len(group) > 1 else ""
    return [
        _when(min(a.get("created_at") or 0 for a in group) or None),
        cause["project"],
        dcc.Link(
            names.get(cause["run"], cause["run"]),
            href=f"/runs/{cause['run']}" + (f"?step={step}" if step is not None else ""),
            title=cause["run"],
            className="gw-nowrap",
        ),
        badge(worst, worst),
        html.Span([html.Code(c, className="gw-nowrap") for c in checks], className="gw-checks"),
        "—" if step is None else step,
        sentence + more,
        deliveries_summary(counts),
    ]


def alerts_view(api: Api) -> tuple[Any, Any, Any]:
    """The alerts, deliveries and rules tables (or why they cannot be shown)."""
    try:
        alerts = api.get("/alerts", limit=LIMIT)
        deliveries = api.get("/alert-deliveries", limit=LIMIT)
        rules = api.get("/alert-rules")
    except ApiError as e:
        why = "this server has no alerts API" if e.status == 404 else e.detail
        return empty_state(f"Alerts are not available: {why}.", id="alerts-missing"), "", ""
    try:
        names = {r["id"]: r["name"] for r in api.get("/runs", limit=RUNS)["data"]}
    except ApiError:
        names = {}
    alert_rows = [_incident_row(group, names) for group in incidents(alerts["data"])]
    delivery_rows = [
        [
            _when(d.get("updated_at")),
            d["alert"],
            d["rule"],
            d["url"],
            badge(d["status"], {"delivered": "ok", "failed": "error"}.get(d["status"], "info")),
            d["attempts"],
            d.get("http_status") or "—",
            d.get("error") or "",
        ]
        for d in deliveries["data"]
    ]
    return (
        table(
            ["time", "project", "run", "severity", "checks", "step", "what happened", "deliveries"],
            alert_rows,
            id="alerts-list",
        )
        if alert_rows
        else empty_state("No alerts yet."),
        table(
            ["updated", "alert", "rule", "url", "status", "attempts", "HTTP", "error"],
            delivery_rows,
        )
        if delivery_rows
        else empty_state("No webhook deliveries yet."),
        rules_table(rules["data"], lambda i: html.Button("remove", id={"type": DELETE, "id": i}))
        if rules["data"]
        else empty_state("No rules: add one to get alerts."),
    )


def add_rule(
    api: Api, project: str | None, check: str | None, severity: str | None, webhook: str | None
) -> str:
    """Create a rule; the sentence to show (the server's reason when it refuses)."""
    body = {
        "project": (project or "").strip(),
        "check": (check or "").strip() or None,
        "min_severity": severity,
        "webhook_url": (webhook or "").strip() or None,
        "enabled": True,
    }
    if not body["project"]:
        return "A rule needs a project."
    try:
        rule = api.request("POST", "/alert-rules", body=body)
    except ApiError as e:
        return f"Rule not added: {e.detail}"
    return f"Rule {rule['id']} added."


def register(app: Dash) -> None:
    """Refresh the tables; add and remove rules."""

    @app.callback(
        Output(ids.ALERTS_TABLE, "children"),
        Output(ids.ALERTS_DELIVERIES, "children"),
        Output(ids.ALERTS_RULES, "children"),
        Input(ids.ALERTS_TICK, "n_intervals"),
        Input(ids.RULE_MESSAGE, "children"),
    )
    def _tables(_tick: int | None, _message: Any) -> tuple[Any, Any, Any]:
        return alerts_view(from_request())

    @app.callback(
        Output(ids.RULE_MESSAGE, "children"),
        Input(ids.RULE_ADD, "n_clicks"),
        Input({"type": DELETE, "id": ALL}, "n_clicks"),
        State(ids.RULE_PROJECT, "value"),
        State(ids.RULE_CHECK, "value"),
        State(ids.RULE_SEVERITY, "value"),
        State(ids.RULE_WEBHOOK, "value"),
        prevent_initial_call=True,
    )
    def _edit(
        _add: int | None,
        removes: list[int | None],
        project: str | None,
        check: str | None,
        severity: str | None,
        webhook: str | None,
    ) -> str:
        api = from_request()
        trigger = ctx.triggered_id
        if isinstance(trigger, dict) and trigger.get("type") == DELETE:
            if not any(removes):
                return ""
            try:
                api.request("DELETE", f"/alert-rules/{trigger['id']}")
            except ApiError as e:
                return f"Rule not removed: {e.detail}"
            return f"Rule {trigger['id']} removed."
        return add_rule(api, project, check, severity, webhook)
