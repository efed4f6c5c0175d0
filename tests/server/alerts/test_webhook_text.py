"""Webhook message text (issue 19 item 8): user text cannot address or link in chat."""

from __future__ import annotations

import json

from gradwatch_server.alerts.webhooks import body_of

ALERT = {
    "id": 1,
    "project": "p",
    "run": "r1",
    "check": "loss-nan",
    "severity": "error",
    "step": 3,
    "param": "<!channel>",
    "message": "see <https://evil.example|the docs> & ping @everyone <@U123>",
}


def test_user_text_is_escaped_for_slack_and_discord() -> None:
    body = json.loads(body_of(ALERT))
    text = body["text"]
    for live in ("<!channel>", "<https://", "<@U123>", "@everyone", " & "):
        assert live not in text, live
    assert "&lt;!channel&gt;" in text and "&amp;" in text and "@\u200beveryone" in text
    assert body["allowed_mentions"] == {"parse": []}
    assert body["gradwatch"]["message"] == ALERT["message"]  # the data keeps the original
