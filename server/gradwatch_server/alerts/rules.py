"""Alert rules, and the alerts and webhook deliveries that new findings raise.

``raise_alerts`` runs in the transaction that stores findings (ingest, or the server's own
``repro-drift`` / ``seed-envelope`` findings), so a finding raises its alert exactly once
however many server processes ingest: findings are stored once per ``(run, seq, idx)``
and the alert row has the same unique key. A finding matches a rule of its project when
the rule is enabled and its check id (if set), its severity threshold (if set) and its
group (if set) all match; the alert lists every matching rule, and each matching rule
with a webhook gets one delivery (sent by :mod:`gradwatch_server.alerts.webhooks`).
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlmodel import Session

from gradwatch.core.catalogue import CHECKS
from gradwatch_server.alerts.incident_regroup import regroup
from gradwatch_server.alerts.targets import TargetRefusedError, check_target
from gradwatch_server.exceptions import RequestError
from gradwatch_server.groupkey import group_key
from gradwatch_server.models import Alert, AlertDelivery, AlertRule
from gradwatch_server.schemas import AlertRuleFields
from gradwatch_server.store import insert_ignore, run_sql

SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
_RUN = "SELECT project_id, config_hash, code_hash FROM runs WHERE id = ?"
#: the project's enabled rules, oldest first as the ORM query returned them (primary key)
_RULES = (
    'SELECT id, "check", min_severity, group_key, webhook_url FROM alert_rules '
    "WHERE project_id = ? AND enabled ORDER BY id"
)


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
    found = run_sql(session, _RUN, (run_id,))
    if not found:
        return []
    project_id, config_hash, code_hash = found[0]
    rules = [
        AlertRule(
            id=r[0],
            project_id=project_id,
            check=r[1],
            min_severity=r[2],
            group_key=r[3],
            webhook_url=r[4],
            enabled=True,
            created_at=0.0,
        )
        for r in run_sql(session, _RULES, (project_id,))
    ]
    if not rules:
        return []
    key = group_key(config_hash, code_hash)
    now, created = time.time(), []
    for f in findings:
        hit = [r for r in rules if matches(r, f, key)]
        if not hit:
            continue
        row = {
            "project_id": project_id,
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


def _storable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return value.isprintable()


def check_rule(fields: AlertRuleFields, allow_private: bool, project: str | None = None) -> None:
    """``RequestError(422)`` saying what is wrong with a rule's fields: text that cannot be
    stored, an unknown check id or severity, no condition at all, or a refused webhook host."""
    texts = [project, fields.check, fields.min_severity, fields.group, fields.webhook_url]
    for value in [*texts, fields.secret]:
        if value is not None and not _storable(value):
            raise RequestError(422, "rule fields must be printable UTF-8 text (no NUL)")
    if fields.check is not None and fields.check not in CHECKS:
        raise RequestError(422, f"unknown check id {fields.check!r}; see CHECKS.md for the ids")
    if fields.min_severity is not None and fields.min_severity not in SEVERITY_RANK:
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
