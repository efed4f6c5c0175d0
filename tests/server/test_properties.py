"""Hypothesis: exact non-finite floats end to end, no 5xx on any body, order-free replay."""

from __future__ import annotations

import itertools
import math
import struct
import uuid
from typing import Any

import numpy as np
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import MetaData, select

from gradwatch.server.jsonresp import decode_float
from gradwatch.wire import Array, Kind, Record, encode_frame
from tests.server import frames as f

FIXTURE_OK = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
floats64 = st.floats(allow_nan=True, allow_infinity=True)


def same_float(a: float, b: float) -> bool:
    """Bit-exact for numbers (so -0.0 differs from 0.0), class-exact for NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return struct.pack("<d", a) == struct.pack("<d", b)


@FIXTURE_OK
@given(values=st.lists(floats64, min_size=1, max_size=60))
def test_any_float_survives_ingest_db_and_api_exactly(
    client: TestClient, values: list[float]
) -> None:
    run = f"p-{uuid.uuid4().hex}"
    n = len(values)
    stats = np.array(values, dtype="<f8").reshape(n, 1, 1).repeat(4, axis=2)
    body = b"".join(f.frames([f.start(run, tensors=["w"]), f.steps(1, stats, dtype="f8")]))
    assert client.post("/api/v1/ingest", content=body, headers=f.headers(run)).status_code == 200
    got = client.get(f"/api/v1/runs/{run}/series", params={"tensor": "w", "points": 1000}).json()
    series = got["data"][0]
    assert series["steps"] == list(range(1, n + 1))
    back = [decode_float(v) for v in series["values"]]
    assert all(same_float(a, b) for a, b in zip(values, back, strict=True))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | floats64 | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
arrays = st.dictionaries(
    st.sampled_from(["step", "stats", "loss", "key", "value", "x"]),
    st.builds(
        lambda dtype, n: Array.from_buffer(
            dtype, (n,), bytes(n * {"f8": 8, "i8": 8, "u1": 1}[dtype])
        ),
        st.sampled_from(["f8", "i8", "u1"]),
        st.integers(0, 4),
    ),
    max_size=3,
)
records = st.builds(
    Record,
    st.sampled_from(list(Kind)),
    st.dictionaries(
        st.sampled_from(
            [
                "run",
                "project",
                "name",
                "tags",
                "started_at",
                "pid",
                "optimizer",
                "stats",
                "keys",
                "findings",
                "steps",
                "status",
                "t",
                "phase",
            ]
        ),
        json_values,
        max_size=6,
    ),
    arrays,
)


@FIXTURE_OK
@given(
    body=st.one_of(
        st.binary(max_size=200),
        st.lists(st.tuples(st.integers(1, 2**64 - 1), records), min_size=1, max_size=4).map(
            lambda items: b"".join(encode_frame(seq, rec) for seq, rec in items)
        ),
    ),
    run=st.sampled_from(["r1", "r2", "", "a" * 200, "ok.run-1"]),
    schema=st.sampled_from(["1", "0", "x"]),
)
def test_no_body_or_header_gives_a_5xx(
    client: TestClient, body: bytes, run: str, schema: str
) -> None:
    reply = client.post(
        "/api/v1/ingest",
        content=body,
        headers={"X-Gradwatch-Run": run, "X-Gradwatch-Schema": schema},
    )
    assert reply.status_code < 500, reply.text
    assert reply.status_code == 200 or reply.json()["detail"]
    assert client.get("/api/v1/runs").status_code == 200
    if reply.status_code == 200:
        assert client.get(f"/api/v1/runs/{run}").status_code == 200
        assert client.get(f"/api/v1/runs/{run}/findings").status_code == 200


def run_frames() -> list[bytes]:
    """A run whose RUN_START does not name itself, so its frames fit any run id."""
    stats = np.arange(6 * 2 * 4, dtype="f4").reshape(6, 2, 4)
    stats[2, 1, 0] = np.nan
    start = f.start("x")
    del start.meta["run"]
    finding = {"check": "c", "severity": "warning", "step": 2, "message": "m", "t": 1.0}
    return f.frames(
        [
            start,
            Record(Kind.FINGERPRINT, {"phase": "fast", "seed": 1}),
            f.steps(1, stats[:3]),
            f.steps(4, stats[3:]),
            Record(Kind.FINDINGS, {"findings": [finding]}),
            Record(Kind.HEARTBEAT, {"t": 1_700_000_001.0, "steps": [6]}),
            Record(Kind.FINGERPRINT, {"phase": "slow", "code_hash": "abc"}),
            f.end(steps_done=6),
        ]
    )


def dump(client: TestClient, run: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``run``, without its id and the server's receive times."""
    meta = MetaData()
    engine = client.app.state.engine  # type: ignore[attr-defined]
    meta.reflect(engine)
    out = {}
    with engine.connect() as conn:
        for name, table in sorted(meta.tables.items()):
            key = table.c.get("run_id", table.c.get("id") if name == "runs" else None)
            if key is None:
                continue
            cols = [c for c in table.c if c.name not in ("run_id", "id", "received_at")]
            rows = conn.execute(select(*cols).where(key == run)).all()
            out[name] = sorted(tuple(r) for r in rows)
    return out


@FIXTURE_OK
@given(data=st.data())
def test_replaying_batches_in_any_order_and_multiplicity_gives_the_same_database(
    client: TestClient, data: st.DataObject
) -> None:
    frames = run_frames()
    ref, run = f"ref-{uuid.uuid4().hex}", f"x-{uuid.uuid4().hex}"
    client.post("/api/v1/ingest", content=b"".join(frames), headers=f.headers(ref))
    sends = data.draw(st.lists(st.sampled_from(range(len(frames))), min_size=1, max_size=30))
    sends += data.draw(st.permutations(range(len(frames))))
    cut = data.draw(st.lists(st.integers(0, len(sends)), max_size=5))
    bounds = sorted({0, len(sends), *cut})
    for lo, hi in itertools.pairwise(bounds):
        body = b"".join(frames[i] for i in sends[lo:hi])
        reply = client.post("/api/v1/ingest", content=body, headers=f.headers(run))
        assert reply.status_code == 200
    assert dump(client, run) == dump(client, ref)
