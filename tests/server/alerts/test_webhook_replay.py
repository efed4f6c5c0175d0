"""Webhook replay protection: the signature covers the delivery's timestamp, and the
verification that docs/drift.md shows (run here as written there) accepts a fresh
delivery on a real loopback receiver and refuses the same delivery sent again later, a
changed body, a changed timestamp and another secret."""

from __future__ import annotations

import hashlib
import hmac
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gradwatch_server.alerts.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, deliver_pass
from gradwatch_server.app import create_app, webhook_policy
from gradwatch_server.db import make_engine
from gradwatch_server.ingest.spool_import import import_run
from gradwatch_server.settings import Settings
from tests.server.live import LOCAL, wait_for
from tests.server.receiver import receiver
from tests.server.training import stale_grad_run

DOCS = Path(__file__).resolve().parents[3] / "docs" / "drift.md"
SECRET = "s3cret-of-the-rule"
TOLERANCE = 2.0  # seconds the test's receiver accepts a delivery for


def documented_verify() -> Callable[..., bool]:
    """The ``verify`` function of docs/drift.md, executed as the docs print it."""
    text = DOCS.read_text()
    section = text[text.index("### Verifying a webhook") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code, "docs/drift.md has no Python verification snippet"
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), str(DOCS), "exec"), namespace)
    verify: Callable[..., bool] = namespace["verify"]
    return verify


def _resend(url: str, headers: dict[str, str], body: bytes) -> int:
    keep = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
    request = urllib.request.Request(url, data=body, headers=keep, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


@pytest.mark.slow
def test_a_captured_delivery_is_refused_when_sent_again_later(settings: Settings) -> None:
    verify = documented_verify()
    settings = settings.with_(allow_private_webhooks=True)
    check = lambda headers, body: verify(SECRET, body, headers, tolerance=TOLERANCE)  # noqa: E731
    with receiver(check) as hook, TestClient(create_app(settings), base_url=LOCAL) as client:
        made = client.post(
            "/api/v1/alert-rules",
            json={
                "project": "ci",
                "min_severity": "error",
                "webhook_url": hook.url + "/hook",
                "secret": SECRET,
            },
        )
        assert made.status_code == 201, made.text
        run = stale_grad_run("ci")
        engine = make_engine(settings.db_url)
        try:
            import_run(engine, run.dir)
            policy = webhook_policy(settings)
            wait_for(lambda: deliver_pass(engine, policy) == 0 and hook.requests, "a delivery")
        finally:
            engine.dispose()
        (first,) = hook.requests
        assert first.status == 200  # fresh and signed: the receiver took it
        stamp = int(first.headers[TIMESTAMP_HEADER])
        assert abs(time.time() - stamp) < 60
        headers, body = first.headers, first.body
        # the signature is over "<timestamp>." + body, not the body alone
        body_only = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert headers[SIGNATURE_HEADER] != body_only
        assert not verify(SECRET, body, {**headers, SIGNATURE_HEADER: body_only})
        # forged: another body, a newer timestamp on the old signature, another secret
        assert not verify(SECRET, body.replace(b"stale-grad", b"stale-grab"), headers)
        assert not verify(SECRET, body, {**headers, TIMESTAMP_HEADER: str(int(time.time()) + 1)})
        assert not verify("another secret", body, headers)
        assert not verify(SECRET, body, {k: v for k, v in headers.items() if k != TIMESTAMP_HEADER})
        # replayed: the captured delivery, byte for byte, once it is older than the tolerance
        time.sleep(max(0.0, stamp + TOLERANCE + 1.5 - time.time()))
        assert _resend(hook.url + "/hook", headers, body) == 401
        assert hook.requests[-1].body == body and hook.requests[-1].status == 401
