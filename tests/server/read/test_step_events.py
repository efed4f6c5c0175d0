"""``GET /runs/{id}/lifecycle``: the per-step events of a bounded window of steps."""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient

from gradwatch.core.wire import Array
from gradwatch_server.read.step_events import window
from tests.server import frames as f

EVENTS = [["zero_grad", 0.001, ""], ["backward", 0.01, ""], ["step", 0.02, ""]]


def test_window_bounds() -> None:
    assert window(1000, None, None, 200) == (801, 1000)
    assert window(1000, 10, None, 200) == (10, 209)
    assert window(1000, 10, 5000, 200) == (10, 209)
    assert window(1000, None, 50, 200) == (0, 50)
    assert window(0, None, None, 200) == (0, 0)


def test_events_and_backward_counts_by_step(client: TestClient) -> None:
    stats = np.ones((6, 2, 4), dtype="f4")
    records = [f.start("r1"), f.steps(1, stats[:3]), f.steps(4, stats[3:]), f.end(steps_done=6)]
    for i, rec in enumerate(records[1:3]):
        rec.meta["events"] = [EVENTS if i == 0 else EVENTS[1:]] * 3
        rec.arrays["n_backward"] = Array.from_buffer("i4", (3,), np.ones(3, "<i4").tobytes())
    client.post("/api/v1/ingest", content=b"".join(f.frames(records)), headers=f.headers("r1"))
    got = client.get("/api/v1/runs/r1/lifecycle", params={"start": 2, "limit": 3}).json()
    assert (got["start"], got["end"], got["count"]) == (2, 4, 3)
    assert [r["step"] for r in got["data"]] == [2, 3, 4]
    assert got["data"][0] == {"step": 2, "n_backward": 1, "events": EVENTS}
    assert got["data"][2]["events"] == EVENTS[1:]  # step 4: no zero_grad
    last = client.get("/api/v1/runs/r1/lifecycle", params={"limit": 2}).json()
    assert [r["step"] for r in last["data"]] == [5, 6]
    assert client.get("/api/v1/runs/nope/lifecycle").status_code == 404
    assert client.get("/api/v1/runs/r1/lifecycle", params={"limit": 0}).status_code == 422
