"""Bounded cost per request (issue 19): output budget, body limit, length limits."""

from __future__ import annotations

from fastapi.testclient import TestClient

from gradwatch.server.series import MAX_REPLY_VALUES
from tests.server import frames as f


def ingest(client: TestClient, run: str, body: bytes) -> int:
    return client.post("/api/v1/ingest", content=body, headers=f.headers(run)).status_code


def test_repeated_names_are_one_series_and_a_reply_over_budget_is_422(client: TestClient) -> None:
    assert ingest(client, "r1", b"".join(f.simple_run("r1", n=10, tensors=2))) == 200
    repeated = {"tensor": ["t0"] * 40, "stat": ["grad_norm"] * 40, "points": 1_000_000}
    reply = client.get("/api/v1/runs/r1/series", params=repeated)
    assert reply.status_code == 200 and reply.json()["count"] == 1
    assert len(reply.json()["data"][0]["values"]) == 10
    wide = {"tensor": ["t0", "t1"], "stat": f.STATS, "points": MAX_REPLY_VALUES // 4}
    reply = client.get("/api/v1/runs/r1/series", params=wide)
    assert reply.status_code == 422
    assert "8 series × 250,000 points" in reply.json()["detail"]
    overview = client.get("/api/v1/runs/r1/overview", params={"points": 5000})
    assert overview.status_code == 200
