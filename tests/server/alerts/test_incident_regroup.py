"""Incidents on the server: stored with every finding (SQLite and PostgreSQL), regrouped in
step order at ingest, returned by the API, and leading the webhook text."""

from __future__ import annotations

import math

import pytest
import torch
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import Connection
from torch import nn

import gradwatch
from gradwatch.checks.findings import finding
from gradwatch_server.alerts.webhooks import deliver_pass
from gradwatch_server.app import create_app, webhook_policy
from gradwatch_server.db import make_engine
from gradwatch_server.ingest.spool_import import import_run
from gradwatch_server.settings import Settings
from tests.server.live import LOCAL
from tests.server.receiver import receiver
from tests.server.training import job_of_two, train

JUMP = "learning rate of group 0 jumped from 0.01 to 10,000 at step 9."


def nan_after_lr_jump() -> gradwatch.Run:
    """A real run; its NaN loss finding is stored before the LR finding that explains it
    (the order a writer-thread check can give), then one unrelated finding."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with gradwatch.watch(model, opt, project="inc") as run:
        train(run, model, opt, 3, shape=(8, 3))
        sink = run._sink
        sink.report(finding("nonfinite-loss", 10, "loss is NaN.", "stop.", severity="error"))
        sink.report(
            finding("loss-diverging", 12, "loss grew 1e6×.", "look.", details={"x": math.inf})
        )
        sink.report(finding("exploding-grad", 9, JUMP, "lower it.", severity="error"))
        sink.report(finding("eval-mode-training", 1, "model in eval mode.", "call train()."))
    return run


def test_incident_and_role_are_stored_regrouped_and_returned(
    client: TestClient, settings: Settings
) -> None:
    run = nan_after_lr_jump()
    live = [(f.check, f.incident, f.role) for f in run.findings]
    assert live[0] == ("nonfinite-loss", "nonfinite-loss@10", "cause")  # as seen live
    engine = make_engine(settings.db_url)
    import_run(engine, run.dir)
    engine.dispose()
    found = client.get(f"/api/v1/runs/{run.id}/findings").json()["data"]
    assert [(f["check"], f["step"], f["incident"], f["role"]) for f in found] == [
        ("eval-mode-training", 1, "eval-mode-training@1", "cause"),
        ("exploding-grad", 9, "exploding-grad@9", "cause"),
        ("nonfinite-loss", 10, "exploding-grad@9", "consequence"),
        ("loss-diverging", 12, "exploding-grad@9", "consequence"),
    ]
    assert found[3]["details"] == {
        "x": {"$f": "inf"}
    }  # tagged: the string "Infinity" stays a string


def test_the_webhook_text_leads_with_the_incident_sentence(
    settings: Settings, request: pytest.FixtureRequest
) -> None:
    settings = settings.with_(allow_private_webhooks=True)
    engine = make_engine(settings.db_url)
    request.addfinalizer(engine.dispose)
    with receiver() as hook, TestClient(create_app(settings), base_url=LOCAL) as client:
        client.post(
            "/api/v1/alert-rules",
            json={"project": "inc", "min_severity": "error", "webhook_url": hook.url + "/h"},
        )
        run = nan_after_lr_jump()
        import_run(engine, run.dir)
        deliver_pass(engine, webhook_policy(settings))
        texts = sorted(r.json()["text"] for r in hook.to("/h"))
        alerts = client.get("/api/v1/alerts", params={"project": "inc"}).json()["data"]
    assert (
        texts
        == [
            f"gradwatch [error] in run {run.id}: exploding-grad: {JUMP[:-1]}; then nonfinite-loss "
            "at step 10, loss-diverging at step 12.",
        ]
        * 2
    )
    assert sorted((a["check"], a["incident"], a["role"]) for a in alerts) == [
        ("exploding-grad", "exploding-grad@9", "cause"),
        ("nonfinite-loss", "exploding-grad@9", "consequence"),
    ]


def test_the_api_lists_the_runs_of_one_job(
    client: TestClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, alone = job_of_two(nan_after_lr_jump, monkeypatch, "job-one")
    engine = make_engine(settings.db_url)
    for run in (first, second, alone):
        import_run(engine, run.dir)
    engine.dispose()
    listed = client.get("/api/v1/runs").json()["data"]
    assert {r["id"]: r["job"] for r in listed} == {
        first.id: "job-one",
        second.id: "job-one",
        alone.id: alone.id,
    }
    members = client.get("/api/v1/runs", params={"job": "job-one"}).json()
    assert sorted(r["id"] for r in members["data"]) == sorted([first.id, second.id])


def test_the_migration_groups_findings_stored_before_it(db_url: str) -> None:
    from alembic import command

    from gradwatch_server.migrate import alembic_config

    engine = make_engine(db_url)
    with engine.connect() as conn:
        config = alembic_config(conn)
        command.upgrade(config, "head")
        command.downgrade(config, "0004_issue7")
        conn.commit()
        try:
            _old_findings(conn)
        finally:  # the shared PostgreSQL schema goes back to the newest revision
            command.upgrade(config, "head")
            conn.commit()
        got = conn.execute(text('SELECT "check", incident, role FROM findings ORDER BY idx'))
        rows = [tuple(r) for r in got.all()]
    engine.dispose()
    assert rows == [
        ("loss-diverging", "stale-grad@2", "consequence"),
        ("stale-grad", "stale-grad@2", "cause"),
    ]


def _old_findings(conn: Connection) -> None:
    """A run with two findings, stored as revision 0004 stored them."""
    conn.execute(text("INSERT INTO projects (name) VALUES ('old')"))
    conn.execute(
        text(
            "INSERT INTO runs (id, project_id, name, steps, received_at, frames, start_meta) "
            "SELECT 'r-old', id, 'r-old', 0, 0, 0, '{}' FROM projects WHERE name = 'old'"
        )
    )
    for idx, (check, step) in enumerate([("loss-diverging", 40), ("stale-grad", 2)]):
        conn.execute(
            text(
                'INSERT INTO findings (run_id, seq, idx, "check", severity, step, message, '
                "hint, source, details, t) VALUES ('r-old', 5, :idx, :check, 'error', :step, "
                "'m', '', 'runtime', '{}', 'null')"
            ),
            {"idx": idx, "check": check, "step": step},
        )
    conn.commit()


def test_the_incidents_view_leads_with_the_sentence(client: TestClient, settings: Settings) -> None:
    run = nan_after_lr_jump()
    engine = make_engine(settings.db_url)
    import_run(engine, run.dir)
    engine.dispose()
    body = client.get(f"/api/v1/runs/{run.id}/incidents").json()
    assert body["count"] == 2
    first, second = body["data"]
    assert (first["id"], first["severity"]) == ("eval-mode-training@1", "warning")
    assert first["consequences"] == []
    assert second["sentence"] == (
        f"exploding-grad: {JUMP[:-1]}; then nonfinite-loss at step 10, loss-diverging at step 12."
    )
    assert second["cause"]["check"] == "exploding-grad"
    assert [f["check"] for f in second["consequences"]] == ["nonfinite-loss", "loss-diverging"]
    assert second["consequences"][1]["details"] == {
        "x": {"$f": "inf"}
    }  # tagged: the string "Infinity" stays a string
    assert client.get("/api/v1/runs/no-such-run/incidents").status_code == 404
