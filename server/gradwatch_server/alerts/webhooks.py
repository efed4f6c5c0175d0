"""Webhook delivery of alerts: Slack-compatible body, HMAC-SHA256 signature, retries.

The body is ``{"text": one line, "allowed_mentions": ..., "gradwatch": the Alert object}``
(Slack's incoming webhooks read ``text`` and ignore the rest; user text in ``text`` is
escaped, see ``chat_text``). Every attempt carries ``X-Gradwatch-Timestamp``, the Unix time
of the attempt in whole seconds; with a rule secret, ``X-Gradwatch-Signature:
sha256=<hex>`` is the HMAC-SHA256, with that secret, of the timestamp, a ``.`` and the raw
body (``f"{timestamp}.".encode() + body``), as the common webhook schemes sign. A receiver
that checks the signature and rejects timestamps older than a few minutes cannot be fed a
captured delivery again later (docs/drift.md shows the check in Python). A 2xx answer
delivers; anything else (another status, a timeout, a refused target) is retried after
``backoff × 2^(attempt-1)`` seconds, up to ``attempts`` tries, then the delivery is
``failed``. Every attempt is appended to the delivery's log.

Targets (see :mod:`gradwatch_server.alerts.targets`): only http(s); a host that resolves to a
non-global address is refused (at rule creation and again at every send, since DNS may
change) unless the server allows private targets, and each send connects to the address
it checked. Redirects are not followed.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.engine import Engine
from sqlmodel import Session, col

from gradwatch_server.alerts.queries import public_alerts
from gradwatch_server.alerts.targets import Target, TargetRefusedError, check_target, connection
from gradwatch_server.db import write_session
from gradwatch_server.models import Alert, AlertDelivery, AlertRule, Project, Run

log = logging.getLogger("gradwatch_server")
SIGNATURE_HEADER = "X-Gradwatch-Signature"
TIMESTAMP_HEADER = "X-Gradwatch-Timestamp"
DELIVERY_HEADER = "X-Gradwatch-Delivery"
LEASE_S = 60.0  # a claimed delivery is retried by another process after this


@dataclass(frozen=True)
class WebhookPolicy:
    """How deliveries are made (from the server settings)."""

    allow_private: bool = False
    attempts: int = 5
    backoff: float = 1.0
    timeout: float = 5.0


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The value of the signature header for ``body`` sent at ``timestamp``."""
    signed = f"{timestamp}.".encode() + body
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def body_of(alert: dict[str, Any]) -> bytes:
    """The Slack-compatible JSON body of one alert: its incident's sentence (the root
    cause first) when the alert has one, else the finding's own message."""
    where = f" at step {alert['step']}" if alert.get("step") is not None else ""
    param = f" [{alert['param']}]" if alert.get("param") else ""
    text = (
        f"gradwatch [{alert['severity']}] {alert['check']} in run {alert['run']}{where}{param}: "
        f"{alert['message']}"
    )
    if alert.get("summary"):
        text = f"gradwatch [{alert['severity']}] in run {alert['run']}: {alert['summary']}"
    # the alert is already plain JSON (details tagged by public_alerts): no second tagging
    body = {"text": chat_text(text), "allowed_mentions": {"parse": []}, "gradwatch": alert}
    return json.dumps(body, allow_nan=False, separators=(",", ":")).encode()


def chat_text(text: str) -> str:
    """``text`` made inert as a chat message: ``&``, ``<`` and ``>`` escaped as Slack asks
    (so no ``<!channel>``, ``<@U123>`` or ``<url|label>`` from a tensor name or message),
    and ``@`` followed by a zero-width space (no Discord ``@everyone``/``@here``; the body's
    ``allowed_mentions`` says the same to Discord). The ``gradwatch`` object keeps the
    original text."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped.replace("@", "@\u200b")


def send(url: str, body: bytes, headers: dict[str, str], policy: WebhookPolicy) -> int:
    """POST once; the HTTP status (raises ``OSError`` / ``TargetRefusedError`` on failure)."""
    return post(check_target(url, allow_private=policy.allow_private), body, headers, policy)


def post(target: Target, body: bytes, headers: dict[str, str], policy: WebhookPolicy) -> int:
    """POST once to a checked target (its checked address); the HTTP status."""
    conn = connection(target, policy.timeout)
    try:
        conn.request("POST", target.path, body=body, headers=headers)
        reply = conn.getresponse()
        reply.read(1 << 16)
        return int(reply.status)
    finally:
        conn.close()


def _claim(session: Session, row: AlertDelivery, now: float) -> bool:
    done = session.execute(
        update(AlertDelivery)
        .where(
            col(AlertDelivery.id) == row.id,
            col(AlertDelivery.status) == "pending",
            col(AlertDelivery.next_attempt_at) == row.next_attempt_at,
        )
        .values(next_attempt_at=now + LEASE_S)
    )
    return bool(getattr(done, "rowcount", 0))


def deliver_pass(engine: Engine, policy: WebhookPolicy, limit: int = 50) -> int:
    """Send every due delivery once; the number attempted. Never raises."""
    now = time.time()
    with write_session(engine) as session:
        due = list(
            session.execute(
                select(AlertDelivery)
                .where(
                    col(AlertDelivery.status) == "pending",
                    col(AlertDelivery.next_attempt_at) <= now,
                )
                .order_by(col(AlertDelivery.next_attempt_at))
                .limit(limit)
            ).scalars()
        )
        claimed = [
            (row.id, row.url, row.alert_id, row.rule_id) for row in due if _claim(session, row, now)
        ]
    for delivery_id, url, alert_id, rule_id in claimed:
        try:
            _attempt(engine, int(delivery_id or 0), url, alert_id, rule_id, policy)
        except Exception as e:  # a database hiccup: the lease expires and it is retried
            log.warning("webhook delivery %s: %s: %s", delivery_id, type(e).__name__, e)
    return len(claimed)


def _attempt(
    engine: Engine, delivery_id: int, url: str, alert_id: int, rule_id: int, policy: WebhookPolicy
) -> None:
    with Session(engine) as session:
        row = session.execute(
            select(Alert, col(Project.name), Run)
            .join(Project, col(Project.id) == col(Alert.project_id))
            .join(Run, col(Run.id) == col(Alert.run_id))
            .where(col(Alert.id) == alert_id)
        ).first()
        rule = session.get(AlertRule, rule_id)
        delivery = session.get(AlertDelivery, delivery_id)
        if row is None or delivery is None:
            return
        alert = public_alerts(session, [(row[0], str(row[1]), row[2])])[0]
    body = body_of(alert)
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        DELIVERY_HEADER: str(delivery_id),
        TIMESTAMP_HEADER: str(timestamp),
    }
    if rule is not None and rule.secret:
        headers[SIGNATURE_HEADER] = signature(rule.secret, timestamp, body)
    status, error = None, None
    try:
        status = send(url, body, headers, policy)
        if not 200 <= status < 300:
            error = f"HTTP {status}"
    except (OSError, TargetRefusedError, http.client.HTTPException) as e:
        error = f"{type(e).__name__}: {e}"[:500]
    now = time.time()
    attempts = delivery.attempts + 1
    entries = [*json.loads(delivery.log), {"at": now, "http_status": status, "error": error}]
    state = (
        "delivered" if error is None else ("failed" if attempts >= policy.attempts else "pending")
    )
    retry_at = now + policy.backoff * 2 ** (attempts - 1) if state == "pending" else None
    with write_session(engine) as session:
        session.execute(
            update(AlertDelivery)
            .where(col(AlertDelivery.id) == delivery_id)
            .values(
                status=state,
                attempts=attempts,
                http_status=status,
                error=error,
                updated_at=now,
                next_attempt_at=retry_at,
                log=json.dumps(entries),
            )
        )
