"""Alert rules, alerts from findings, and webhook delivery to a real loopback receiver."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine

from gradwatch.core.paths import runs_dir
from gradwatch_server.alerts.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, deliver_pass
from gradwatch_server.app import create_app, webhook_policy
from gradwatch_server.db import make_engine
from gradwatch_server.drift.live import drift_pass
from gradwatch_server.ingest.spool_import import import_run
from gradwatch_server.migrate import migrate
from gradwatch_server.settings import Settings
from tests.collector.drift_runs import SCRIPT
from tests.server.live import LOCAL, live_server, sqlite_with, wait_for
from tests.server.receiver import receiver
from tests.server.training import stale_grad_run


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "ftp://example.com/hook",
    ],
)
def test_internal_webhook_targets_are_refused_unless_allowed(client: TestClient, url: str) -> None:
    reply = client.post(
        "/api/v1/alert-rules", json={"project": "p", "check": "repro-drift", "webhook_url": url}
    )
    assert reply.status_code == 422
    assert "--allow-private-webhooks" in reply.json()["detail"] or "http" in reply.json()["detail"]
    assert client.get("/api/v1/alert-rules").json()["count"] == 0  # nothing was stored


def test_rule_validation_and_editing(client: TestClient) -> None:
    bad = [
        {"project": "p", "check": "no-such-check"},
        {"project": "p", "min_severity": "fatal"},
        {"project": "p"},
    ]
    for body in bad:
        assert client.post("/api/v1/alert-rules", json=body).status_code == 422
    rule = client.post("/api/v1/alert-rules", json={"project": "p", "min_severity": "error"})
    assert rule.status_code == 201
    made = rule.json()
    assert (made["min_severity"], made["has_secret"], made["webhook_url"]) == ("error", False, None)
    patched = client.patch(f"/api/v1/alert-rules/{made['id']}", json={"enabled": False}).json()
    assert patched["enabled"] is False and patched["min_severity"] == "error"
    assert client.patch(f"/api/v1/alert-rules/{made['id']}", json={"x": 1}).status_code == 422
    assert client.delete(f"/api/v1/alert-rules/{made['id']}").status_code == 204
    assert client.delete(f"/api/v1/alert-rules/{made['id']}").status_code == 404


def test_a_runtime_finding_matching_a_rule_becomes_an_alert_at_ingest(
    client: TestClient, settings: Settings
) -> None:
    client.post("/api/v1/alert-rules", json={"project": "ci", "min_severity": "error"})
    client.post("/api/v1/alert-rules", json={"project": "other", "min_severity": "info"})
    run = stale_grad_run("ci")
    engine = make_engine(settings.db_url)
    import_run(engine, run.dir)
    import_run(engine, run.dir)  # a replay stores nothing twice
    engine.dispose()
    alerts = client.get("/api/v1/alerts", params={"project": "ci"}).json()
    assert [a["check"] for a in alerts["data"]] == ["stale-grad"]
    assert alerts["data"][0]["severity"] == "error" and alerts["data"][0]["run"] == run.id
    assert alerts["data"][0]["deliveries"] == {"delivered": 0, "failed": 0, "pending": 0}


def migrated(url: str, request: pytest.FixtureRequest) -> Engine:
    """A migrated engine on ``url``, disposed when the test ends (whatever happens)."""
    engine = make_engine(url)
    request.addfinalizer(engine.dispose)
    migrate(engine)
    return engine


def _signed(request_headers: dict[str, str], body: bytes, secret: str) -> bool:
    signed = request_headers[TIMESTAMP_HEADER].encode() + b"." + body
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(request_headers.get(SIGNATURE_HEADER, ""), expected)


@pytest.mark.slow
def test_a_drift_alert_is_signed_retried_with_backoff_and_logged(
    settings: Settings, drift_runs: tuple[Path, dict[str, str]], request: pytest.FixtureRequest
) -> None:
    root, ids = drift_runs
    settings = settings.with_(allow_private_webhooks=True, webhook_backoff=0.05, webhook_attempts=3)
    engine = migrated(settings.db_url, request)
    with receiver() as hook, TestClient(create_app(settings), base_url=LOCAL) as client:
        rules = [
            client.post(
                "/api/v1/alert-rules",
                json={"project": "drift", "check": "repro-drift", "webhook_url": hook.url + path}
                | ({"secret": "s3cret"} if path == "/flaky" else {}),
            ).json()
            for path in ("/flaky", "/down")
        ]
        for name in ("base", "perturb"):
            import_run(engine, runs_dir(root) / ids[name])
        client.put(
            f"/api/v1/groups/{_group(client, ids['base'])}/baseline", json={"run": ids["base"]}
        )
        assert drift_pass(engine) == [ids["perturb"]]
        policy = webhook_policy(settings)

        def settled() -> bool:
            deliver_pass(engine, policy)
            states = {d["status"] for d in client.get("/api/v1/alert-deliveries").json()["data"]}
            return states == {"delivered", "failed"}

        wait_for(settled, "both deliveries to settle")
        flaky, down = hook.to("/flaky"), hook.to("/down")
        assert [r.status for r in flaky] == [500, 200] and [r.status for r in down] == [503] * 3
        assert all(_signed(r.headers, r.body, "s3cret") for r in flaky)
        assert all(SIGNATURE_HEADER not in r.headers for r in down)  # that rule has no secret
        body = flaky[-1].json()
        assert "repro-drift" in body["text"] and "step 7" in body["text"]
        assert (body["gradwatch"]["run"], body["gradwatch"]["step"]) == (ids["perturb"], 7)
        assert body["gradwatch"]["details"]["cause"] == "backward-nondeterminism"

        log = {d["rule"]: d for d in client.get("/api/v1/alert-deliveries").json()["data"]}
        ok, failed = log[rules[0]["id"]], log[rules[1]["id"]]
        assert (ok["status"], ok["attempts"], ok["http_status"]) == ("delivered", 2, 200)
        assert [e["http_status"] for e in ok["log"]] == [500, 200]
        assert (failed["status"], failed["attempts"], failed["error"]) == ("failed", 3, "HTTP 503")
        gaps = [b["at"] - a["at"] for a, b in zip(failed["log"], failed["log"][1:], strict=False)]
        assert gaps[0] >= 0.05 and gaps[1] >= 0.1  # 0.05 s, then doubled
        (alert,) = client.get("/api/v1/alerts").json()["data"]
        assert alert["deliveries"] == {"delivered": 1, "failed": 1, "pending": 0}
        assert sorted(alert["rules"]) == sorted(r["id"] for r in rules)


def _group(client: TestClient, run_id: str) -> str:
    key: str = client.get(f"/api/v1/runs/{run_id}").json()["group"]
    return key


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        out: dict[str, Any] = json.loads(reply.read())
        return out


@pytest.mark.slow
def test_a_run_is_compared_and_alerted_while_it_trains(
    tmp_path: Path, drift_runs: tuple[Path, dict[str, str]]
) -> None:
    """End to end on SQLite: the passes themselves run on both databases above."""
    root, ids = drift_runs
    base = runs_dir(root) / ids["base"]  # the finished replicate
    db_url, engine = sqlite_with(tmp_path / "live.db", base)
    engine.dispose()
    settings = Settings(
        db_url=db_url,
        data_dir=tmp_path / "server-data",
        import_interval=None,
        monitor_interval=0.2,
        allow_private_webhooks=True,
    )
    with receiver() as hook, live_server(settings) as url:
        _post(
            url + "/api/v1/alert-rules",
            {"project": "drift", "check": "repro-drift", "webhook_url": hook.url + "/hook"},
        )
        env = {**os.environ, "GRADWATCH_SERVER": url, "GRADWATCH_CHECKS": "all=record"}
        args = ["--perturb-step", "7", "--perturb-param", "2.weight", "--sleep-after", "1"]
        with subprocess.Popen(
            [sys.executable, str(SCRIPT), str(tmp_path / "train-data"), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as proc:
            try:
                wait_for(lambda: hook.to("/hook") or proc.poll() is not None, "the drift alert")
                still_training = proc.poll() is None
                out, err = proc.communicate(timeout=120)
            finally:
                if proc.poll() is None:
                    proc.kill()
        assert proc.returncode == 0, err[-2000:]
        assert still_training, "the alert came only after the run had ended"
        alert = hook.to("/hook")[0].json()["gradwatch"]
        run_id = out.split("run ", 1)[1].split()[0]
        assert (alert["run"], alert["check"], alert["step"], alert["param"]) == (
            run_id,
            "repro-drift",
            7,
            "2.weight",
        )
