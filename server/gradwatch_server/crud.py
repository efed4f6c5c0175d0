"""Queries behind the API (keyword-only functions over a session); no HTTP here."""

from __future__ import annotations

import json
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlmodel import Session, col

from gradwatch.checks.incidents import views
from gradwatch.lint.confirm import confirmation, confirming_checks
from gradwatch.wire import loads_tagged, to_jsonable
from gradwatch_server import groups
from gradwatch_server.auth import Access
from gradwatch_server.exceptions import RequestError
from gradwatch_server.models import (
    Alert,
    AlertDelivery,
    AlertRule,
    Finding,
    Fingerprint,
    Project,
    Run,
    RunTag,
)
from gradwatch_server.schemas import (
    AlertRuleCreate,
    AlertRuleFields,
    FindingCounts,
    FindingPublic,
    RunDetail,
    RunPublic,
)
from gradwatch_server.status import StatusPolicy, run_status
from gradwatch_server.store import ensure_project


def load_json(text: str | None) -> Any:
    """Stored JSON text back to Python (non-finite floats restored)."""
    return None if text is None else loads_tagged(text)


def tagged(value: Any) -> Any:
    """Free-form data (details, start and end records, fingerprints) as the API sends it:
    non-finite floats in the wire's tagged form ``{"$f": "nan"}``, so that NaN and the
    string ``"NaN"`` stay distinct (decode with ``gradwatch.wire.from_jsonable``)."""
    return to_jsonable(value)


def list_runs(
    session: Session,
    *,
    policy: StatusPolicy,
    project: str | None = None,
    status: str | None = None,
    tag: str | None = None,
    config_hash: str | None = None,
    group: str | None = None,
    ddp_group: str | None = None,
    job: str | None = None,
    offset: int = 0,
    limit: int = 100,
) -> tuple[list[RunPublic], int]:
    """A page of runs matching the filters (newest first) and the total count."""
    query = select(Run, col(Project.name)).join(Project, col(Project.id) == col(Run.project_id))
    if project is not None:
        query = query.where(col(Project.name) == project)
    if config_hash is not None:
        query = query.where(col(Run.config_hash) == config_hash)
    if group is not None:
        query = query.where(groups.in_group(group))
    if ddp_group is not None:
        query = query.where(col(Run.group_id) == ddp_group)
    if job is not None:
        query = query.where(col(Run.job_id) == job)
    if tag is not None:
        tagged = select(col(RunTag.run_id)).where(col(RunTag.tag) == tag)
        query = query.where(col(Run.id).in_(tagged))
    query = query.order_by(col(Run.started_at).desc(), col(Run.id).desc())
    now = time.time()
    rows = [(run, name, run_status(run, policy, now)) for run, name in session.execute(query)]
    if status is not None:
        rows = [r for r in rows if r[2] == status]
    page = rows[offset : offset + limit]
    ids = [run.id for run, _, _ in page]
    counts, tags = _finding_counts(session, ids), _tags(session, ids)
    seeds = groups.seeds(session, ids)
    data = [
        _public(run, name, st, counts.get(run.id), tags.get(run.id), seeds.get(run.id))
        for run, name, st in page
    ]
    return data, len(rows)


def _public(
    run: Run,
    project: str,
    status: str,
    counts: FindingCounts | None,
    tags: list[str] | None,
    seed: int | None = None,
) -> RunPublic:
    return RunPublic(
        id=run.id,
        name=run.name or run.id,
        project=project,
        status=status,
        steps=run.steps,
        config_hash=run.config_hash,
        code_hash=run.code_hash,
        tags=tags or [],
        host=run.host,
        pid=run.pid,
        started=run.started_at,
        ended=run.ended_at,
        last_seen=run.last_t,
        frames=run.frames,
        findings=counts or FindingCounts(),
        group=groups.group_key(run.config_hash, run.code_hash),
        seed=seed,
        ddp_group=run.group_id,
        rank=run.rank,
        world_size=run.world_size,
        job=run.job_id or run.group_id or run.id,
    )


def _finding_counts(session: Session, ids: Sequence[str]) -> dict[str, FindingCounts]:
    if not ids:
        return {}
    query = (
        select(col(Finding.run_id), col(Finding.severity), func.count())
        .where(col(Finding.run_id).in_(ids))
        .group_by(col(Finding.run_id), col(Finding.severity))
    )
    out: dict[str, FindingCounts] = {}
    for run_id, severity, n in session.execute(query):
        setattr(out.setdefault(run_id, FindingCounts()), severity, int(n))
    return out


def _tags(session: Session, ids: Sequence[str]) -> dict[str, list[str]]:
    if not ids:
        return {}
    query = select(col(RunTag.run_id), col(RunTag.tag)).where(col(RunTag.run_id).in_(ids))
    out: dict[str, list[str]] = {}
    for run_id, tag in session.execute(query.order_by(col(RunTag.tag))):
        out.setdefault(run_id, []).append(tag)
    return out


def get_run_row(
    session: Session, run_id: str, access: Access, scope: str = "read"
) -> tuple[Run, str]:
    """The run and its project name, or 404 for an unknown run *and* for a run of a
    project the caller cannot see (the same reply, naming no project: ids and project
    names cannot be probed); 403 only for the wrong scope on the caller's own project."""
    row = session.execute(
        select(Run, col(Project.name))
        .join(Project, col(Project.id) == col(Run.project_id))
        .where(col(Run.id) == run_id)
    ).first()
    if row is None or not access.sees(str(row[1])):
        raise RequestError(404, f"no run {run_id[:130]!r}; list runs with GET /api/v1/runs")
    access.check(str(row[1]), scope)
    return row[0], str(row[1])


def public_run(session: Session, *, run: Run, project: str, policy: StatusPolicy) -> RunPublic:
    """One run as the list shows it."""
    return _public(
        run,
        project,
        run_status(run, policy, time.time()),
        _finding_counts(session, [run.id]).get(run.id),
        _tags(session, [run.id]).get(run.id),
        groups.seeds(session, [run.id]).get(run.id),
    )


def get_run(session: Session, *, run: Run, project: str, policy: StatusPolicy) -> RunDetail:
    """A run with its start record, merged fingerprint and end record."""
    public = public_run(session, run=run, project=project, policy=policy)
    return RunDetail(
        **public.model_dump(),
        start=tagged(load_json(run.start_meta) or {}),
        fingerprint=tagged(fingerprint(session, run_id=run.id)),
        end=tagged(load_json(run.end_meta)),
    )


def fingerprint(session: Session, *, run_id: str) -> dict[str, Any]:
    """The run's FINGERPRINT records merged (fast phase first, then slow, by seq)."""
    query = (
        select(Fingerprint).where(col(Fingerprint.run_id) == run_id).order_by(col(Fingerprint.seq))
    )
    rows = sorted(session.execute(query).scalars(), key=lambda f: (f.phase != "fast", f.seq))
    merged: dict[str, Any] = {}
    for row in rows:
        merged.update({k: v for k, v in load_json(row.data).items() if k != "phase"})
    return merged


def findings(
    session: Session,
    *,
    run_id: str,
    severity: str | None = None,
    check: str | None = None,
    offset: int = 0,
    limit: int = 1000,
) -> tuple[list[FindingPublic], int]:
    """A page of a run's findings in (step, seq) order, and their total count."""
    query = select(Finding).where(col(Finding.run_id) == run_id)
    if severity is not None:
        query = query.where(col(Finding.severity) == severity)
    if check is not None:
        query = query.where(col(Finding.check) == check)
    total = session.execute(select(func.count()).select_from(query.subquery())).scalar_one()
    ordered = query.order_by(col(Finding.step), col(Finding.seq), col(Finding.idx))
    rows = session.execute(ordered.offset(offset).limit(limit)).scalars().all()
    out = [_finding(f) for f in rows]
    lint = [f for f in out if f.source == "lint"]
    if lint:
        runtime = _confirming(session, run_id, {f.check for f in lint})
        for f in lint:
            f.confirmed_by = confirmation(f.check, runtime)
            f.confirmed = f.confirmed_by is not None
    return out, int(total)


def _confirming(session: Session, run_id: str, rules: set[str]) -> list[dict[str, Any]]:
    """The run's runtime findings that could confirm lint findings of ``rules``."""
    checks = confirming_checks(rules)
    if not checks:
        return []
    query = select(col(Finding.check), col(Finding.step), col(Finding.details)).where(
        col(Finding.run_id) == run_id,
        col(Finding.source) == "runtime",
        col(Finding.check).in_(sorted(checks)),
    )
    return [
        {"check": c, "step": step, "details": load_json(d) or {}, "source": "runtime"}
        for c, step, d in session.execute(query).all()
    ]


def _finding(f: Finding) -> FindingPublic:
    return FindingPublic(
        run=f.run_id,
        check=f.check,
        severity=f.severity,
        step=f.step,
        optimizer=f.optimizer,
        param=f.param,
        message=f.message,
        hint=f.hint,
        details=tagged(load_json(f.details) or {}),
        t=tagged(load_json(f.t)),
        source=f.source,
        incident=f.incident,
        role=f.role,
    )


def incidents(session: Session, run_id: str) -> list[dict[str, Any]]:
    """The run's findings as incidents (:func:`gradwatch.checks.incidents.views`), each with its
    sentence; every finding of the run is read (findings are onsets, so they are few)."""
    found, _ = findings(session, run_id=run_id, limit=1 << 30)
    return [
        {
            "id": view.id,
            "severity": view.severity,
            "sentence": view.sentence(),
            "cause": view.cause,
            "consequences": view.consequences,
        }
        for view in views([f.model_dump() for f in found])
    ]


# -- alerts, alert rules and the delivery log ---------------------------------------------
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
            "group": groups.group_key(run.config_hash, run.code_hash),
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
