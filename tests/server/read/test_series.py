"""Series: downsampling keeps extremes and non-finite points; the API selects and ranges."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fastapi.testclient import TestClient

from gradwatch.core.nonfinite import decode_float
from gradwatch_server.read.series import downsample
from tests.server import frames as f


def test_short_series_are_returned_whole() -> None:
    steps, values = np.arange(5), np.array([3.0, 1.0, 2.0, 5.0, 4.0])
    kept_steps, kept = downsample(steps, values, 10)
    assert kept_steps.tolist() == steps.tolist() and kept.tolist() == values.tolist()


def test_each_bucket_keeps_its_min_and_max() -> None:
    rng = np.random.default_rng(1)
    values = rng.normal(size=1000)
    steps = np.arange(1000)
    kept_steps, kept = downsample(steps, values, 20)
    assert len(kept) <= 20
    for b in range(10):
        bucket = values[b * 100 : (b + 1) * 100]
        assert bucket.min() in kept and bucket.max() in kept
    assert np.all(np.diff(kept_steps) > 0)
    assert kept.min() == values.min() and kept.max() == values.max()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_every_nonfinite_point_is_kept(bad: float) -> None:
    values = np.linspace(0, 1, 10_000)
    where = [17, 18, 5000, 9999]
    values[where] = bad
    kept_steps, kept = downsample(np.arange(10_000), values, 10)
    nonfinite = kept_steps[~np.isfinite(kept)].tolist()
    assert nonfinite == where
    assert all((math.isnan(v) if math.isnan(bad) else v == bad) for v in kept[~np.isfinite(kept)])


def test_series_selects_tensors_stats_metrics_and_a_step_range(client: TestClient) -> None:
    n = 40
    stats = np.zeros((n, 3, 4), dtype="f4")
    stats[:, :, 0] = np.arange(n)[:, None] * [1, 10, 100]  # grad_norm
    stats[:, :, 2] = -1.0  # update_norm
    body = b"".join(
        f.frames(
            [
                f.start("r1", tensors=["a", "b", "c"]),
                f.steps(1, stats[:25]),
                f.steps(26, stats[25:]),
            ]
        )
    )
    client.post("/api/v1/ingest", content=body, headers=f.headers("r1"))
    params = {"tensor": ["c", "a", "nope"], "stat": ["grad_norm", "update_norm"], "metric": "loss"}
    got = client.get("/api/v1/runs/r1/series", params={**params, "start": 10, "end": 30}).json()
    named = {(s["name"], s.get("stat")): s for s in got["data"]}
    assert set(named) == {
        ("c", "grad_norm"),
        ("a", "grad_norm"),
        ("c", "update_norm"),
        ("a", "update_norm"),
        ("loss", None),
    }
    c = named[("c", "grad_norm")]
    assert c["steps"] == list(range(10, 31))
    assert c["values"] == [100.0 * (s - 1) for s in range(10, 31)]
    assert named[("a", "update_norm")]["values"] == [-1.0] * 21
    assert named[("loss", None)]["steps"] == list(range(10, 31))
    small = client.get("/api/v1/runs/r1/series", params={"tensor": "b", "points": 4}).json()
    b = small["data"][0]
    assert (b["total"], b["downsampled"]) == (n, True)
    assert decode_float(b["values"][0]) == 0.0 and max(b["values"]) == 390.0


def test_unknown_run_is_404(client: TestClient) -> None:
    reply = client.get("/api/v1/runs/nope/series")
    assert reply.status_code == 404 and "no run 'nope'" in reply.json()["detail"]


def test_jsonable_values_are_written_as_the_strict_encoder_writes_them() -> None:
    import json

    from gradwatch.core.nonfinite import encode_floats
    from gradwatch_server.jsonresp import dumps
    from gradwatch_server.read.series import jsonable

    cells = np.array([[1.0, np.nan, np.inf], [-np.inf, -0.0, 5e-324]])
    strict = json.dumps(encode_floats(cells.tolist()), separators=(",", ":")).encode()
    assert dumps(jsonable(cells)) == strict
    assert jsonable(np.array([1.5, 2.0])) == [1.5, 2.0]
