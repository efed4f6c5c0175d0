"""Alert rules, and the alerts and webhook deliveries that new findings raise.

``raise_alerts`` runs in the transaction that stores findings (ingest, or the server's own
``repro-drift`` / ``seed-envelope`` findings), so a finding raises its alert exactly once
however many server processes ingest: findings are stored once per ``(run, seq, idx)``
and the alert row has the same unique key. A finding matches a rule of its project when
the rule is enabled and its check id (if set), its severity threshold (if set) and its
group (if set) all match; the alert lists every matching rule, and each matching rule
with a webhook gets one delivery (sent by :mod:`gradwatch.server.webhooks`).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

from sqlalchemy import func, select
from sqlmodel import Session, col

from gradwatch.server.crud import load_json, tagged
from gradwatch.server.groups import group_key
from gradwatch.server.incident_regroup import regroup
from gradwatch.server.models import Alert, AlertDelivery, AlertRule, Project, Run
from gradwatch.server.store import insert_ignore

SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


def matches(rule: AlertRule, finding: dict[str, Any], key: str | None) -> bool:
    """Whether one finding (a ``findings`` row as a dict) matches ``rule``."""
    if not rule.enabled:
        return False
    if rule.check is not None and finding["check"] != rule.check:
        return False
    if rule.min_severity is not None and SEVERITY_RANK.get(
        finding["severity"], -1
    ) < SEVERITY_RANK.get(rule.min_severity, 0):
        return False
    return rule.group_key is None or rule.group_key == key


def raise_alerts(session: Session, run_id: str, findings: list[dict[str, Any]]) -> list[int]:
    """Alerts (and pending deliveries) for the newly stored ``findings`` of one run, after
    regrouping the run's incidents (an alert names its incident's root cause)."""
    if not findings:
        return []
    placed = regroup(session, run_id)
    run = session.get(Run, run_id)
    if run is None:
        return []
    rules = list(
        session.execute(
            select(AlertRule).where(
                col(AlertRule.project_id) == run.project_id, col(AlertRule.enabled)
            )
        ).scalars()
    )
    if not rules:
        return []
    key = group_key(run.config_hash, run.code_hash)
    now, created = time.time(), []
    for f in findings:
        hit = [r for r in rules if matches(r, f, key)]
        if not hit:
            continue
        row = {
            "project_id": run.project_id,
            "run_id": run_id,
            "seq": f["seq"],
            "idx": f["idx"],
            "check": f["check"],
            "severity": f["severity"],
            "step": f.get("step"),
            "param": f.get("param"),
            "message": f["message"],
            "details": f.get("details", "{}"),
            "rules": json.dumps([r.id for r in hit]),
            "created_at": now,
            **placed.get((f["seq"], f["idx"]), {}),
        }
        for alert_id in insert_ignore(session, Alert, [row], returning="id"):
            created.append(int(alert_id))
            deliveries = [
                {
                    "alert_id": alert_id,
                    "rule_id": r.id,
                    "url": r.webhook_url,
                    "status": "pending",
                    "attempts": 0,
                    "created_at": now,
                    "updated_at": now,
                    "next_attempt_at": now,
                    "log": "[]",
                }
                for r in hit
                if r.webhook_url
            ]
            if deliveries:
                insert_ignore(session, AlertDelivery, deliveries)
    return created


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
