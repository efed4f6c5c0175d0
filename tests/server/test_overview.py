"""The run overview: a tensors × steps heatmap from the coarse level, spikes and NaN kept."""

from __future__ import annotations

import math

import numpy as np
from fastapi.testclient import TestClient

from gradwatch.server.jsonresp import decode_float
from gradwatch.server.overview import BLOCK
from tests.server import frames as f


def test_heatmap_cells_are_bucket_maxima_with_nonfinite_winning(client: TestClient) -> None:
    n = BLOCK * 8
    stats = np.ones((n, 2, 4), dtype="f4")
    stats[:, 1, 0] = 2.0
    stats[5, 0, 0] = 50.0  # a spike in the first block
    stats[BLOCK * 3 + 1, 0, 0] = np.inf
    stats[BLOCK * 3 + 2, 0, 0] = 70.0
    stats[BLOCK * 6, 1, 0] = np.nan
    half = n // 2
    body = b"".join(
        f.frames(
            [
                f.start("r1", tensors=["a", "b"]),
                f.steps(1 + half, stats[half:]),
                f.steps(1, stats[:half]),
            ]
        )
    )
    client.post("/api/v1/ingest", content=body, headers=f.headers("r1"))
    got = client.get("/api/v1/runs/r1/overview", params={"points": 4}).json()
    assert got["tensors"] == ["a", "b"]
    assert got["steps"] == [1, 1 + 2 * BLOCK, 1 + 4 * BLOCK, 1 + 6 * BLOCK]
    a = [decode_float(v) for v in got["values"][0]]
    b = [decode_float(v) for v in got["values"][1]]
    assert a == [50.0, math.inf, 1.0, 1.0]
    assert b[:3] == [2.0, 2.0, 2.0] and math.isnan(b[3])
    assert got["loss"]["total"] == n and got["run"]["steps"] == n


def test_overview_of_an_empty_run(client: TestClient) -> None:
    client.post("/api/v1/ingest", content=f.frames([f.start("r1")])[0], headers=f.headers("r1"))
    got = client.get("/api/v1/runs/r1/overview").json()
    assert (got["steps"], got["values"], got["loss"]) == ([], [], None)
