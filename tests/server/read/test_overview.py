"""The run overview: a tensors × steps heatmap from the coarse level, spikes and NaN kept."""

from __future__ import annotations

import base64
import math

import numpy as np
from fastapi.testclient import TestClient

from gradwatch.core.nonfinite import decode_float
from gradwatch_server.ingest.summaries import BLOCK
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


def test_overview_of_several_stats_in_one_reply_as_typed_arrays(client: TestClient) -> None:
    n = BLOCK * 6
    stats = np.ones((n, 2, 4), dtype="f4")
    stats[:, :, 2] = np.arange(n, dtype="f4")[:, None]  # update_norm: the step index
    stats[BLOCK + 3, 1, 3] = np.nan  # nonfinite_grad: a NaN count, kept exactly
    stats[2 * BLOCK : 4 * BLOCK, 0, 3] = -np.inf  # a whole column: its maximum
    half = n // 2
    body = b"".join(
        f.frames(
            [
                f.start("r1", tensors=["a", "b"]),
                f.steps(1, stats[:half]),
                f.steps(1 + half, stats[half:]),
            ]
        )
    )
    client.post("/api/v1/ingest", content=body, headers=f.headers("r1"))
    also = ["update_norm", "nonfinite_grad"]
    plain = client.get("/api/v1/runs/r1/overview", params={"points": 3, "also": also}).json()
    typed = client.get(
        "/api/v1/runs/r1/overview",
        params={"points": 3, "also": also, "encoding": "base64", "loss": "false"},
    ).json()
    assert plain["steps"] == typed["steps"] == [1, 1 + 2 * BLOCK, 1 + 4 * BLOCK]
    assert typed["loss"] is None and plain["loss"]["total"] == n
    one = client.get("/api/v1/runs/r1/overview", params={"points": 3, "stat": "update_norm"})
    assert plain["also"]["update_norm"] == one.json()["values"]  # the same as asked alone

    def decoded(v: dict[str, object]) -> np.ndarray:
        raw = base64.b64decode(str(v["bdata"]))
        return np.frombuffer(raw, dtype="<" + str(v["dtype"])).reshape(v["shape"])  # type: ignore[arg-type]

    assert typed["values"]["dtype"] == "f4" and typed["values"]["shape"] == [2, 3]
    for stat, values in [("grad_norm", typed["values"]), *typed["also"].items()]:
        json_rows = plain["values"] if stat == "grad_norm" else plain["also"][stat]
        want = np.array([[decode_float(v) for v in row] for row in json_rows])
        np.testing.assert_array_equal(decoded(values), want)  # NaN and -Inf bit for bit
    bad = decoded(typed["also"]["nonfinite_grad"])
    assert math.isnan(bad[1][0]) and bad[0][1] == -math.inf
    assert decoded(typed["also"]["update_norm"])[0].tolist() == [
        2 * BLOCK - 1,
        4 * BLOCK - 1,
        n - 1,
    ]


def test_overview_of_a_stat_never_recorded_is_empty_beside_the_others(client: TestClient) -> None:
    body = b"".join(
        f.frames([f.start("r1", tensors=["a"]), f.steps(1, np.ones((BLOCK, 1, 4), "f4"))])
    )
    client.post("/api/v1/ingest", content=body, headers=f.headers("r1"))
    got = client.get("/api/v1/runs/r1/overview", params={"also": ["no_such_stat"]}).json()
    assert got["values"] == [[1.0]] and got["also"] == {"no_such_stat": []}
