"""Bounded cost per request (issue 19): output budget, body limit, length limits."""

from __future__ import annotations

import socket
import urllib.request

import pytest
from fastapi.testclient import TestClient

from gradwatch_dashboard.bridge import WORKERS
from gradwatch_server.app import create_app
from gradwatch_server.read import series
from gradwatch_server.read.series import MAX_REPLY_VALUES
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import LOCAL, live_server


def ingest(client: TestClient, run: str, body: bytes) -> int:
    return client.post("/api/v1/ingest", content=body, headers=f.headers(run)).status_code


def test_repeated_names_are_one_series_and_a_reply_over_budget_is_422(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ingest(client, "r1", b"".join(f.simple_run("r1", n=10, tensors=2))) == 200
    repeated = {"tensor": ["t0"] * 40, "stat": ["grad_norm"] * 40, "points": 1_000_000}
    reply = client.get("/api/v1/runs/r1/series", params=repeated)
    assert reply.status_code == 200 and reply.json()["count"] == 1
    assert len(reply.json()["data"][0]["values"]) == 10
    # the budget counts the points a series can hold (a 10-step run: 10, whatever is asked)
    wide = {"tensor": ["t0", "t1"], "stat": f.STATS, "points": MAX_REPLY_VALUES // 4}
    assert client.get("/api/v1/runs/r1/series", params=wide).status_code == 200
    monkeypatch.setattr(series, "MAX_REPLY_VALUES", 79)  # 8 series × 10 points is over it
    reply = client.get("/api/v1/runs/r1/series", params=wide)
    assert reply.status_code == 422
    assert "8 series × 11 points" in reply.json()["detail"]  # steps 0-10 at most
    monkeypatch.undo()
    overview = client.get("/api/v1/runs/r1/overview", params={"points": 5000})
    assert overview.status_code == 200


def test_bodies_over_the_limit_are_refused_before_parsing_and_before_the_token(
    settings: Settings,
) -> None:
    secured = settings.with_(require_tokens=True, max_json_bytes=1000)
    big = b"{" + b" " * 5000 + b"}"
    json_type = {"Content-Type": "application/json"}
    with TestClient(create_app(secured), base_url=LOCAL) as client:
        for path in ("/api/v1/alert-rules", "/_dash-update-component"):
            declared = client.post(path, content=big, headers=json_type)
            assert declared.status_code == 413, (path, declared.text)
            assert "1,000-byte limit" in declared.json()["detail"]
            chunked = client.post(path, content=iter([big[:600], big[600:]]), headers=json_type)
            assert chunked.status_code == 413, (path, chunked.text)
        assert client.post("/api/v1/alert-rules", json={}).status_code == 401  # small: as before


def _trickle(base: str, path: str) -> socket.socket:
    """A connection that sends headers announcing 1,000 bytes, then one byte, then waits."""
    host, port = base.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)))
    conn.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Content-Length: 1000\r\n\r\n{".encode()
    )
    return conn


def test_trickling_bodies_hold_no_dashboard_worker(settings: Settings) -> None:
    """More trickling clients than the bridge has threads: pages still load."""
    with live_server(settings.with_(body_timeout=120.0)) as base:
        held = [_trickle(base, "/_dash-update-component") for _ in range(2 * WORKERS)]
        try:
            with urllib.request.urlopen(f"{base}/", timeout=20) as page:
                assert page.status == 200
            with urllib.request.urlopen(f"{base}/_dash-layout", timeout=20) as layout:
                assert layout.status == 200
        finally:
            for conn in held:
                conn.close()


def test_a_body_that_does_not_arrive_in_time_is_408(settings: Settings) -> None:
    with live_server(settings.with_(body_timeout=1.0)) as base:
        conn = _trickle(base, "/api/v1/alert-rules")
        conn.settimeout(30)
        try:
            assert conn.recv(64).startswith(b"HTTP/1.1 408 ")
        finally:
            conn.close()
