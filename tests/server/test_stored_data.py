"""Stored data (issue 19 item 5): ingest checks every field the readers depend on (422),
and a run whose stored data is damaged anyway (an older server wrote it) is shown as far
as it can be read, with the damage named in ``problems``: never a 500."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlalchemy.engine import Engine

from gradwatch.core.wire import FRAME_CONTENT_TYPE, Array, Kind, Record
from gradwatch_dashboard import ids
from gradwatch_dashboard.api_client import Api
from gradwatch_dashboard.pages import run as run_page
from gradwatch_server.db import make_engine
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import live_server

STATS = np.ones((4, 2, 4), dtype="f4")


def post(client: TestClient, run: str, records: list[Record], first_seq: int = 1) -> Any:
    body = b"".join(f.frames(records, first_seq))
    return client.post("/api/v1/ingest", content=body, headers=f.headers(run))


def steps_with(**meta: Any) -> Record:
    record = f.steps(1, STATS)
    record.meta.update(meta)
    return record


def start(**meta: Any) -> Record:
    return Record(Kind.RUN_START, {"run": "r", **meta})


def negative_steps() -> Record:
    record = f.steps(1, STATS)
    steps = np.array([-3, -2, -1, 0], dtype="<i8")
    record.arrays["step"] = Array.from_buffer("i8", (4,), steps.tobytes())
    return record


def finding(**fields: Any) -> Record:
    item = {"check": "loss-nan", "severity": "error", "step": 1, "message": "m", **fields}
    return Record(Kind.FINDINGS, {"findings": [item]})


@pytest.mark.parametrize(
    ("record", "field"),
    [
        (start(tensors="w,b"), "meta.tensors"),
        (start(tensors=[{"name": "w", "optimizer": "0"}]), "meta.tensors[0].optimizer"),
        (start(tensors=[{"name": 3}]), "meta.tensors[0].name"),
        (start(tensors=[7]), "meta.tensors[0]"),
        (steps_with(events=5), "meta.events"),
        (steps_with(events=[[], [], [], ["backward"]]), "meta.events[3]"),
        (steps_with(batch_hash=[1, 2, 3, 4]), "meta.batch_hash[0]"),
        (steps_with(batch_hash=[None]), "meta.batch_hash"),
        (negative_steps(), "array 'step'"),
        (start(name="n" * 1_000_000), "meta.name"),
        (start(host="h" * 300), "meta.host"),
        (finding(message="m" * 5000), "meta.findings[0].message"),
        (finding(hint="h" * 5000), "meta.findings[0].hint"),
        (finding(param="p" * 2000), "meta.findings[0].param"),
        (finding(step=-1), "meta.findings[0].step"),
    ],
)
def test_ingest_refuses_fields_the_readers_could_not_read(
    client: TestClient, record: Record, field: str
) -> None:
    reply = post(client, "r", [record])
    assert reply.status_code == 422, reply.text
    assert f"): {field} " in reply.json()["detail"]
    assert client.get("/api/v1/runs").json()["count"] == 0  # nothing stored


DAMAGED_START = '{"tensors": [{"name": "t0", "optimizer": 0}, {"name": "t1", "optimizer": "x"}]}'


def damage(engine: Engine, run: str) -> None:
    """What an older server accepted: start meta and lifecycle meta of the wrong type."""
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE runs SET start_meta = :m WHERE id = :r"), {"m": DAMAGED_START, "r": run}
        )
        conn.execute(
            text("UPDATE series_chunks SET meta = :m WHERE run_id = :r"),
            {"m": '{"events": 3, "batch_hash": 7}', "r": run},
        )


def damaged_run(send: Callable[[str, bytes], int], engine: Engine) -> None:
    """Runs d1 (damaged; its loss gains a column in a later window) and d2 (intact)."""
    for run in ("d1", "d2"):
        assert send(run, b"".join(f.simple_run(run, n=8))) == 200
    wide = f.steps(20, STATS)  # accepted: a widening lr does this legitimately
    wide.arrays["loss"] = Array.from_buffer("f4", (4, 2), np.ones((4, 2), "<f4").tobytes())
    assert send("d1", b"".join(f.frames([wide], 40))) == 200
    damage(engine, "d1")


def test_damaged_runs_are_shown_as_far_as_they_can_be_read(client: TestClient) -> None:
    def send(run: str, body: bytes) -> int:
        return client.post("/api/v1/ingest", content=body, headers=f.headers(run)).status_code

    damaged_run(send, client.app.state.engine)  # type: ignore[attr-defined]
    base = "/api/v1/runs/d1"
    reads = {
        "series": (f"{base}/series", {"tensor": ["t0", "t1"], "metric": ["loss", "max:steps"]}),
        "max": (f"{base}/series", {"metric": ["max:grad_norm", "stat:grad_norm"]}),
        "overview": (f"{base}/overview", {}),
        "lifecycle": (f"{base}/lifecycle", {}),
        "detail": (base, {}),
        "compare": ("/api/v1/compare", {"a": "d1", "b": "d2"}),
    }
    got = {}
    for name, (path, params) in reads.items():
        reply = client.get(path, params=params)
        assert reply.status_code == 200, (name, reply.text)
        got[name] = reply.json()
    assert [s["name"] for s in got["series"]["data"]] == ["t0", "loss[0]", "loss[1]"]
    assert any("tensor 1 of the run's start record" in p for p in got["series"]["problems"])
    assert any("lifecycle events" in p for p in got["lifecycle"]["problems"])
    assert got["lifecycle"]["count"] > 0 and got["max"]["data"] == []
    assert got["overview"]["tensors"] == ["t0"]


def test_the_run_page_of_a_damaged_run_says_what_is_broken(settings: Settings) -> None:
    engine = make_engine(settings.db_url)
    with live_server(settings) as base:

        def send(run: str, body: bytes) -> int:
            request = urllib.request.Request(
                f"{base}/api/v1/ingest",
                data=body,
                headers=f.headers(run, **{"Content-Type": FRAME_CONTENT_TYPE}),
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as reply:
                return int(reply.status)

        damaged_run(send, engine)
        page = run_page.view(run_page.fetch(Api(base), "d1", None))
    engine.dispose()
    header = str(page[ids.RUN_HEADER])
    assert "Not shown, stored damaged" in header and "tensor 1" in header
