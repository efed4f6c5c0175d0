"""Queries behind the alerts API: alerts, alert rules and the delivery log (keyword-only
functions over a session); no HTTP here."""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlmodel import Session, col

from gradwatch_server.auth import Access
from gradwatch_server.exceptions import RequestError
from gradwatch_server.groupkey import group_key
from gradwatch_server.jsontext import load_json, tagged
from gradwatch_server.models import Alert, AlertDelivery, AlertRule, Project, Run
from gradwatch_server.schemas import AlertRuleCreate, AlertRuleFields
from gradwatch_server.store import ensure_project


def redact_url(url: str | None) -> str | None:
    """``scheme://host/…``: a webhook URL without what makes it a credential (for Slack,
    Discord or Teams the path *is* the secret), for callers with a read token."""
    if url is None:
        return None
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}/…"


def public_rule(rule: AlertRule, project: str, reveal: bool = True) -> dict[str, Any]:
    """The ``AlertRule`` object of the API (the secret itself is never returned; the
    webhook URL only when ``reveal``: to write tokens and on servers without tokens)."""
    return {
        "id": rule.id,
        "project": project,
        "check": rule.check,
        "min_severity": rule.min_severity,
        "group": rule.group_key,
        "webhook_url": rule.webhook_url if reveal else redact_url(rule.webhook_url),
        "has_secret": bool(rule.secret),
        "enabled": rule.enabled,
        "created_at": rule.created_at,
    }


def delivery_counts(session: Session, alert_ids: list[int]) -> dict[int, dict[str, int]]:
    """Deliveries of each alert by status."""
    out: dict[int, dict[str, int]] = {
        a: {"delivered": 0, "failed": 0, "pending": 0} for a in alert_ids
    }
    if not alert_ids:
        return out
    query = (
        select(col(AlertDelivery.alert_id), col(AlertDelivery.status), func.count())
        .where(col(AlertDelivery.alert_id).in_(alert_ids))
        .group_by(col(AlertDelivery.alert_id), col(AlertDelivery.status))
    )
    for alert_id, status, n in session.execute(query):
        out[int(alert_id)][str(status)] = int(n)
    return out


def public_alerts(session: Session, rows: list[tuple[Alert, str, Run]]) -> list[dict[str, Any]]:
    """``Alert`` objects of the API for ``(alert, project name, run)`` rows."""
    counts = delivery_counts(session, [int(a.id or 0) for a, _, _ in rows])
    return [
        {
            "id": a.id,
            "project": project,
            "run": a.run_id,
            "group": group_key(run.config_hash, run.code_hash),
            "check": a.check,
            "severity": a.severity,
            "step": a.step,
            "param": a.param,
            "message": a.message,
            "details": tagged(load_json(a.details) or {}),
            "created_at": a.created_at,
            "rules": json.loads(a.rules),
            "deliveries": counts[int(a.id or 0)],
            "incident": a.incident,
            "role": a.role,
            "summary": a.summary,
        }
        for a, project, run in rows
    ]


def list_alerts(
    session: Session, *, project: str | None, run: str | None, offset: int, limit: int
) -> tuple[list[dict[str, Any]], int]:
    """A page of alerts, newest first, and their count."""
    query = (
        select(Alert, col(Project.name), Run)
        .join(Project, col(Project.id) == col(Alert.project_id))
        .join(Run, col(Run.id) == col(Alert.run_id))
    )
    if project is not None:
        query = query.where(col(Project.name) == project)
    if run is not None:
        query = query.where(col(Alert.run_id) == run)
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    page = session.execute(query.order_by(col(Alert.id).desc()).offset(offset).limit(limit)).all()
    return public_alerts(session, [(a, str(p), r) for a, p, r in page]), int(total)


def list_alert_rules(
    session: Session, *, project: str | None, reveal: bool
) -> list[dict[str, Any]]:
    """Alert rules (of ``project`` when given), by id."""
    query = select(AlertRule, col(Project.name)).join(
        Project, col(Project.id) == col(AlertRule.project_id)
    )
    if project is not None:
        query = query.where(col(Project.name) == project)
    rows = session.execute(query.order_by(col(AlertRule.id))).all()
    return [public_rule(rule, str(name), reveal) for rule, name in rows]


def create_alert_rule(session: Session, body: AlertRuleCreate) -> dict[str, Any]:
    """Store a new rule (creating its project if needed); the public rule."""
    rule = AlertRule(
        project_id=ensure_project(session, body.project),
        created_at=time.time(),
        **_rule_columns(body),
    )
    session.add(rule)
    session.flush()
    return public_rule(rule, body.project)


def get_alert_rule(session: Session, access: Access, rule_id: int) -> tuple[AlertRule, str]:
    """A rule the caller may change and its project (404 for an unknown or foreign rule,
    403 for a read token)."""
    row = session.execute(
        select(AlertRule, col(Project.name))
        .join(Project, col(Project.id) == col(AlertRule.project_id))
        .where(col(AlertRule.id) == rule_id)
    ).first()
    if row is None or not access.sees(str(row[1])):  # foreign rules are "unknown" too
        raise RequestError(404, f"no alert rule {rule_id}; list them with GET /api/v1/alert-rules")
    access.check(str(row[1]), "write")
    return row[0], str(row[1])


# The changeable fields of a rule (``AlertRuleFields``) and the columns that store them.
_RULE_COLUMNS = {
    "check": "check",
    "min_severity": "min_severity",
    "group": "group_key",
    "webhook_url": "webhook_url",
    "secret": "secret",
    "enabled": "enabled",
}


def _rule_columns(fields: AlertRuleFields) -> dict[str, Any]:
    """The stored columns of ``fields``, by column name."""
    return {column: getattr(fields, field) for field, column in _RULE_COLUMNS.items()}


def rule_fields(rule: AlertRule) -> AlertRuleFields:
    """The changeable fields of a stored rule."""
    return AlertRuleFields(
        **{field: getattr(rule, column) for field, column in _RULE_COLUMNS.items()}
    )


def update_alert_rule(session: Session, rule_id: int, fields: AlertRuleFields) -> None:
    """Replace the changeable fields of rule ``rule_id``."""
    session.execute(
        update(AlertRule).where(col(AlertRule.id) == rule_id).values(**_rule_columns(fields))
    )
    session.expire_all()


def delete_alert_rule(session: Session, rule_id: int) -> None:
    """Delete rule ``rule_id`` (its alerts and delivery log stay)."""
    session.execute(delete(AlertRule).where(col(AlertRule.id) == rule_id))


def list_deliveries(
    session: Session,
    access: Access,
    *,
    alert: int | None,
    rule: int | None,
    offset: int,
    limit: int,
) -> tuple[list[dict[str, Any]], int]:
    """A page of the delivery log of the caller's projects, newest first, and its count
    (URLs shortened to their host for read tokens)."""
    query = (
        select(AlertDelivery, col(Project.name))
        .join(Alert, col(Alert.id) == col(AlertDelivery.alert_id))
        .join(Project, col(Project.id) == col(Alert.project_id))
    )
    if access.project is not None:
        query = query.where(col(Project.name) == access.project)
    if alert is not None:
        query = query.where(col(AlertDelivery.alert_id) == alert)
    if rule is not None:
        query = query.where(col(AlertDelivery.rule_id) == rule)
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    rows = session.execute(
        query.order_by(col(AlertDelivery.id).desc()).offset(offset).limit(limit)
    ).all()
    data = [
        {
            "id": d.id,
            "alert": d.alert_id,
            "rule": d.rule_id,
            "url": d.url if access.scope != "read" else redact_url(d.url),
            "status": d.status,
            "attempts": d.attempts,
            "http_status": d.http_status,
            "error": d.error,
            "created_at": d.created_at,
            "updated_at": d.updated_at,
            "next_attempt_at": d.next_attempt_at,
            "log": json.loads(d.log),
        }
        for d, _ in rows
    ]
    return data, int(total)
