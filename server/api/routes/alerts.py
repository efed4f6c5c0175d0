"""Alerts, alert rules (per project, with an optional webhook) and the delivery log."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response
from pydantic import BaseModel, Field
from sqlalchemy import delete, func, select, update
from sqlmodel import col

from gradwatch.catalogue import CHECKS
from gradwatch.server import alerting as alerts
from gradwatch.server.api.deps import (
    EngineDep,
    ReadAccess,
    SessionDep,
    SettingsDep,
    WriteAccess,
    project_filter,
)
from gradwatch.server.auth import Access
from gradwatch.server.db import write_session
from gradwatch.server.errors import RequestError
from gradwatch.server.jsonresp import GWJSONResponse
from gradwatch.server.models import Alert, AlertDelivery, AlertRule, Project
from gradwatch.server.schemas import ErrorReply
from gradwatch.server.store import ensure_project
from gradwatch.server.targets import TargetRefusedError, check_target

router = APIRouter(tags=["alerts"])
_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorReply} for code in (401, 403, 404, 422)
}
Offset = Annotated[int, Query(ge=0, le=1 << 31)]
RuleId = Annotated[int, Path(ge=1, le=(1 << 31) - 1)]
IdFilter = Annotated[int | None, Query(ge=1, le=(1 << 31) - 1)]
Limit = Annotated[int, Query(ge=1, le=1000)]


class RuleFields(BaseModel):
    """The changeable fields of an alert rule."""

    check: str | None = Field(default=None, max_length=256)
    min_severity: str | None = Field(default=None, max_length=16)
    group: str | None = Field(default=None, max_length=600)
    webhook_url: str | None = Field(default=None, max_length=2000)
    secret: str | None = Field(default=None, max_length=1000)
    enabled: bool = True


class RuleCreate(RuleFields):
    """A new alert rule of ``project``."""

    project: str = Field(min_length=1, max_length=256)


@router.get("/alerts", responses=_ERRORS)
def list_alerts(
    session: SessionDep,
    access: ReadAccess,
    project: Annotated[str | None, Query(max_length=256)] = None,
    run: Annotated[str | None, Query(max_length=128)] = None,
    offset: Offset = 0,
    limit: Limit = 100,
) -> GWJSONResponse:
    """Alerts (findings that matched a rule), newest first, with their delivery counts."""
    project = project_filter(access, project)
    data, count = alerts.list_alerts(session, project=project, run=run, offset=offset, limit=limit)
    return GWJSONResponse({"data": data, "count": count})


def _storable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return value.isprintable()


def _validate(fields: RuleFields, allow_private: bool, project: str | None = None) -> None:
    texts = [project, fields.check, fields.min_severity, fields.group, fields.webhook_url]
    for value in [*texts, fields.secret]:
        if value is not None and not _storable(value):
            raise RequestError(422, "rule fields must be printable UTF-8 text (no NUL)")
    if fields.check is not None and fields.check not in CHECKS:
        raise RequestError(422, f"unknown check id {fields.check!r}; see CHECKS.md for the ids")
    if fields.min_severity is not None and fields.min_severity not in alerts.SEVERITY_RANK:
        raise RequestError(
            422, f"min_severity must be one of info, warning, error, got {fields.min_severity!r}"
        )
    if fields.check is None and fields.min_severity is None:
        raise RequestError(422, "a rule needs a check id, a min_severity, or both")
    if fields.webhook_url is not None:
        try:
            check_target(fields.webhook_url, allow_private=allow_private)
        except TargetRefusedError as e:
            raise RequestError(422, str(e)) from e


@router.get("/alert-rules", responses=_ERRORS)
def list_rules(
    session: SessionDep,
    access: ReadAccess,
    project: Annotated[str | None, Query(max_length=256)] = None,
) -> GWJSONResponse:
    """Alert rules, by id (webhook URLs shortened to their host for read tokens)."""
    project = project_filter(access, project)
    query = select(AlertRule, col(Project.name)).join(
        Project, col(Project.id) == col(AlertRule.project_id)
    )
    if project is not None:
        query = query.where(col(Project.name) == project)
    rows = session.execute(query.order_by(col(AlertRule.id))).all()
    reveal = access.scope != "read"
    data = [alerts.public_rule(rule, str(name), reveal) for rule, name in rows]
    return GWJSONResponse({"data": data, "count": len(data)})


@router.post("/alert-rules", status_code=201, responses=_ERRORS)
def create_rule(
    body: RuleCreate, engine: EngineDep, access: WriteAccess, settings: SettingsDep
) -> GWJSONResponse:
    """Create a rule: which findings of the project alert, and where the webhook goes."""
    access.check(body.project, "write")
    _validate(body, settings.allow_private_webhooks, body.project)
    with write_session(engine) as session:
        project_id = ensure_project(session, body.project)
        rule = AlertRule(
            project_id=project_id,
            check=body.check,
            min_severity=body.min_severity,
            group_key=body.group,
            webhook_url=body.webhook_url,
            secret=body.secret,
            enabled=body.enabled,
            created_at=time.time(),
        )
        session.add(rule)
        session.flush()
        public = alerts.public_rule(rule, body.project)
    return GWJSONResponse(public, status_code=201)


def _rule(session: Any, access: Access, rule_id: int) -> tuple[AlertRule, str]:
    row = session.execute(
        select(AlertRule, col(Project.name))
        .join(Project, col(Project.id) == col(AlertRule.project_id))
        .where(col(AlertRule.id) == rule_id)
    ).first()
    if row is None or not access.sees(str(row[1])):  # foreign rules are "unknown" too
        raise RequestError(404, f"no alert rule {rule_id}; list them with GET /api/v1/alert-rules")
    access.check(str(row[1]), "write")
    return row[0], str(row[1])


@router.patch("/alert-rules/{rule_id}", responses=_ERRORS)
def update_rule(
    rule_id: RuleId,
    body: dict[str, Any],
    engine: EngineDep,
    access: WriteAccess,
    settings: SettingsDep,
) -> GWJSONResponse:
    """Change some fields of a rule (the others stay)."""
    with write_session(engine) as session:
        rule, project = _rule(session, access, rule_id)
        current = {
            "check": rule.check,
            "min_severity": rule.min_severity,
            "group": rule.group_key,
            "webhook_url": rule.webhook_url,
            "secret": rule.secret,
            "enabled": rule.enabled,
        }
        unknown = set(body) - set(current)
        if unknown:
            raise RequestError(422, f"unknown rule fields {sorted(unknown)}; see {sorted(current)}")
        try:
            fields = RuleFields.model_validate(current | body)
        except ValueError as e:
            raise RequestError(422, f"invalid rule: {e}"[:500]) from e
        _validate(fields, settings.allow_private_webhooks)
        session.execute(
            update(AlertRule)
            .where(col(AlertRule.id) == rule_id)
            .values(
                check=fields.check,
                min_severity=fields.min_severity,
                group_key=fields.group,
                webhook_url=fields.webhook_url,
                secret=fields.secret,
                enabled=fields.enabled,
            )
        )
        session.expire_all()
        public = alerts.public_rule(_rule(session, access, rule_id)[0], project)
    return GWJSONResponse(public)


@router.delete("/alert-rules/{rule_id}", status_code=204, responses=_ERRORS)
def delete_rule(rule_id: RuleId, engine: EngineDep, access: WriteAccess) -> Response:
    """Delete a rule (its alerts and delivery log stay)."""
    with write_session(engine) as session:
        _rule(session, access, rule_id)
        session.execute(delete(AlertRule).where(col(AlertRule.id) == rule_id))
    return Response(status_code=204)


@router.get("/alert-deliveries", responses=_ERRORS)
def list_deliveries(
    session: SessionDep,
    access: ReadAccess,
    alert: IdFilter = None,
    rule: IdFilter = None,
    offset: Offset = 0,
    limit: Limit = 100,
) -> GWJSONResponse:
    """The webhook delivery log, newest first (URLs shortened to their host for read
    tokens: a webhook URL is a credential)."""
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
            "url": d.url if access.scope != "read" else alerts.redact_url(d.url),
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
    return GWJSONResponse({"data": data, "count": int(total)})
