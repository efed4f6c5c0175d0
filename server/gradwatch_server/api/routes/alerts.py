"""Alerts, alert rules (per project, with an optional webhook) and the delivery log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from gradwatch_server.alerts import queries
from gradwatch_server.alerts.rules import check_rule
from gradwatch_server.api.deps import (
    EngineDep,
    ReadAccess,
    SessionDep,
    SettingsDep,
    WriteAccess,
    project_filter,
)
from gradwatch_server.db import write_session
from gradwatch_server.jsonresp import GWJSONResponse
from gradwatch_server.schemas import (
    AlertDeliveriesPublic,
    AlertRuleCreate,
    AlertRulePatch,
    AlertRulePublic,
    AlertRulesPublic,
    AlertsPublic,
    error_replies,
)

router = APIRouter(tags=["alerts"])
_ERRORS = error_replies(401, 403, 404, 422)
Offset = Annotated[int, Query(ge=0, le=1 << 31)]
RuleId = Annotated[int, Path(ge=1, le=(1 << 31) - 1)]
IdFilter = Annotated[int | None, Query(ge=1, le=(1 << 31) - 1)]
Limit = Annotated[int, Query(ge=1, le=1000)]


@router.get("/alerts", response_model=AlertsPublic, responses=_ERRORS)
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
    data, count = queries.list_alerts(session, project=project, run=run, offset=offset, limit=limit)
    return GWJSONResponse({"data": data, "count": count})


@router.get("/alert-rules", response_model=AlertRulesPublic, responses=_ERRORS)
def list_rules(
    session: SessionDep,
    access: ReadAccess,
    project: Annotated[str | None, Query(max_length=256)] = None,
) -> GWJSONResponse:
    """Alert rules, by id (webhook URLs shortened to their host for read tokens)."""
    project = project_filter(access, project)
    data = queries.list_alert_rules(session, project=project, reveal=access.scope != "read")
    return GWJSONResponse({"data": data, "count": len(data)})


@router.post("/alert-rules", status_code=201, response_model=AlertRulePublic, responses=_ERRORS)
def create_rule(
    body: AlertRuleCreate, engine: EngineDep, access: WriteAccess, settings: SettingsDep
) -> GWJSONResponse:
    """Create a rule: which findings of the project alert, and where the webhook goes."""
    access.check(body.project, "write")
    check_rule(body, settings.allow_private_webhooks, body.project)
    with write_session(engine) as session:
        public = queries.create_alert_rule(session, body)
    return GWJSONResponse(public, status_code=201)


@router.patch("/alert-rules/{rule_id}", response_model=AlertRulePublic, responses=_ERRORS)
def update_rule(
    rule_id: RuleId,
    body: AlertRulePatch,
    engine: EngineDep,
    access: WriteAccess,
    settings: SettingsDep,
) -> GWJSONResponse:
    """Change some fields of a rule (the others stay; ``null`` clears a field)."""
    with write_session(engine) as session:
        rule, project = queries.get_alert_rule(session, access, rule_id)
        fields = queries.rule_fields(rule).model_copy(
            update=body.model_dump(include=body.model_fields_set)
        )
        check_rule(fields, settings.allow_private_webhooks)
        queries.update_alert_rule(session, rule_id, fields)
        public = queries.public_rule(queries.get_alert_rule(session, access, rule_id)[0], project)
    return GWJSONResponse(public)


@router.delete(
    "/alert-rules/{rule_id}",
    status_code=204,
    response_class=Response,
    responses=_ERRORS,
)
def delete_rule(rule_id: RuleId, engine: EngineDep, access: WriteAccess) -> Response:
    """Delete a rule (its alerts and delivery log stay). No body: 204."""
    with write_session(engine) as session:
        queries.get_alert_rule(session, access, rule_id)
        queries.delete_alert_rule(session, rule_id)
    return Response(status_code=204)


@router.get("/alert-deliveries", response_model=AlertDeliveriesPublic, responses=_ERRORS)
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
    data, count = queries.list_deliveries(
        session, access, alert=alert, rule=rule, offset=offset, limit=limit
    )
    return GWJSONResponse({"data": data, "count": count})
