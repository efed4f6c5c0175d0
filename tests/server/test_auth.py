"""Tokens: loopback needs none; otherwise 401 without, 403 for another project or scope."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from gradwatch.core.wire import Kind, Record
from gradwatch_server.app import create_app
from gradwatch_server.cli_actions import check_bind, new_token
from gradwatch_server.db import make_engine
from gradwatch_server.exceptions import ServerConfigError
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import LOCAL


@pytest.fixture
def locked(settings: Settings) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """An app that requires tokens, and tokens of projects a and b."""
    secured = settings.with_(require_tokens=True)
    tokens = {f"{p}-{s}": new_token(secured, p, s) for p in ("a", "b") for s in ("read", "write")}
    with TestClient(create_app(secured), base_url=LOCAL) as client:
        yield client, tokens


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def ingest(client: TestClient, run: str, project: str, token: str | None) -> int:
    auth = bearer(token) if token else {}
    body = b"".join(f.simple_run(run, project=project))
    return client.post(
        "/api/v1/ingest", content=body, headers={**f.headers(run), **auth}
    ).status_code


def test_non_loopback_settings_always_require_tokens(settings: Settings) -> None:
    assert settings.with_(host="0.0.0.0").require_tokens
    assert not settings.with_(host="::1").require_tokens


def test_a_non_loopback_bind_is_refused_until_a_token_exists(settings: Settings) -> None:
    public = settings.with_(host="0.0.0.0")
    with pytest.raises(ServerConfigError, match=r"refusing to listen on 0\.0\.0\.0"):
        check_bind(public)
    new_token(public, "a", "write")
    check_bind(public)


def test_ingest_needs_a_write_token_of_the_runs_project(
    locked: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = locked
    assert ingest(client, "r1", "a", None) == 401
    assert ingest(client, "r1", "a", "gw_not-a-token") == 401
    assert ingest(client, "r1", "a", tokens["a-read"]) == 403
    assert ingest(client, "r1", "a", tokens["b-write"]) == 403
    assert ingest(client, "r1", "a", tokens["a-write"]) == 200


def test_reads_need_a_read_token_and_see_only_its_project(
    locked: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = locked
    ingest(client, "ra", "a", tokens["a-write"])
    ingest(client, "rb", "b", tokens["b-write"])
    assert client.get("/api/v1/runs").status_code == 401
    mine = client.get("/api/v1/runs", headers=bearer(tokens["a-read"])).json()
    assert [r["id"] for r in mine["data"]] == ["ra"]
    foreign = client.get("/api/v1/runs/rb", headers=bearer(tokens["a-read"]))
    unknown = client.get("/api/v1/runs/rz", headers=bearer(tokens["a-read"]))
    assert foreign.status_code == unknown.status_code == 404  # foreign looks unknown
    assert foreign.json()["detail"] == unknown.json()["detail"].replace("rz", "rb")
    assert client.get("/api/v1/runs/ra", headers=bearer(tokens["a-read"])).status_code == 200
    other = client.get("/api/v1/runs", params={"project": "b"}, headers=bearer(tokens["a-read"]))
    assert other.status_code == 403
    series = client.get("/api/v1/runs/rb/series", headers=bearer(tokens["b-write"]))
    assert series.status_code == 403


def test_only_token_digests_are_stored(settings: Settings) -> None:
    secret = new_token(settings, "a", "write")
    engine = make_engine(settings.db_url)
    with engine.connect() as conn:
        stored = conn.exec_driver_sql("SELECT digest FROM tokens").scalars().all()
    engine.dispose()
    assert secret not in stored and len(stored) == 1


def test_read_tokens_see_webhook_urls_without_their_secret_path(
    locked: tuple[TestClient, dict[str, str]],
) -> None:
    client, tokens = locked
    url = "http://93.184.216.34/services/T0/B0/s3cr3t-path"
    rule = {"project": "a", "min_severity": "info", "webhook_url": url}
    made = client.post("/api/v1/alert-rules", json=rule, headers=bearer(tokens["a-write"]))
    assert made.status_code == 201 and made.json()["webhook_url"] == url  # its writer sees it
    ingest(client, "ra", "a", tokens["a-write"])
    finding = {"check": "loss-nan", "severity": "error", "step": 1, "message": "m"}
    body = b"".join(f.frames([Record(Kind.FINDINGS, {"findings": [finding]})], first_seq=9))
    auth = {**f.headers("ra"), **bearer(tokens["a-write"])}
    assert client.post("/api/v1/ingest", content=body, headers=auth).status_code == 200
    read = bearer(tokens["a-read"])
    rules = client.get("/api/v1/alert-rules", headers=read)
    deliveries = client.get("/api/v1/alert-deliveries", headers=read)
    assert rules.json()["data"][0]["webhook_url"] == "http://93.184.216.34/…"
    assert deliveries.json()["data"][0]["url"] == "http://93.184.216.34/…"
    assert "s3cr3t" not in rules.text + deliveries.text
