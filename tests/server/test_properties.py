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

from gradwatch.core.nonfinite import decode_float
from gradwatch.core.wire import Array, Kind, Record, encode_frame
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


# --- any frames the server accepts can be read back: no read route answers 5xx ---

NUMPY = {"f4": "<f4", "f8": "<f8", "i4": "<i4", "i8": "<i8", "u1": "u1"}
small_text = st.text(max_size=4)


@st.composite
def arrays_of(draw: st.DrawFn, n: int) -> dict[str, Array]:
    """STEPS arrays around ``n`` steps: right and wrong shapes, any bytes (NaN included)."""
    out = {}
    steps = draw(st.lists(st.integers(-2, 200), min_size=n, max_size=n))
    out["step"] = Array.from_buffer("i8", (n,), np.asarray(steps, dtype="<i8").tobytes())
    for name in draw(st.sets(st.sampled_from(["stats", "loss", "has_loss", "lr", "n_backward"]))):
        dtype = draw(st.sampled_from(sorted(NUMPY)))
        shape = draw(st.sampled_from([(n,), (n, 2), (n, draw(st.integers(0, 3)), 4), (n + 1,), ()]))
        size = int(np.prod(shape)) * np.dtype(NUMPY[dtype]).itemsize
        out[name] = Array.from_buffer(dtype, shape, draw(st.binary(min_size=size, max_size=size)))
    return out


@st.composite
def plausible_records(draw: st.DrawFn) -> Record:
    """Records close to what a collector sends, with every field sometimes wrong."""
    kind = draw(st.sampled_from([Kind.RUN_START, Kind.STEPS, Kind.FINDINGS, Kind.FINGERPRINT]))
    if kind == Kind.RUN_START:
        tensor = st.fixed_dictionaries(
            {"name": small_text | st.integers(), "optimizer": st.integers(-1, 2) | small_text}
        )
        meta = {
            "tensors": draw(st.lists(tensor, max_size=3) | json_values),
            "config_hash": draw(st.sampled_from(["c1", None])),
            "options": draw(json_values),
        }
        return Record(kind, meta)
    if kind == Kind.STEPS:
        n = draw(st.integers(0, 4))
        per_step = st.lists(
            st.lists(st.lists(json_values, max_size=3), max_size=2), min_size=n, max_size=n
        )
        meta = {
            "optimizer": draw(st.integers(0, 1)),
            "stats": f.STATS,
            "events": draw(st.none() | per_step | json_values),
            "batch_hash": draw(
                st.none() | st.lists(small_text | st.none(), min_size=n, max_size=n)
            ),
        }
        return Record(kind, meta, draw(arrays_of(n)))
    if kind == Kind.FINDINGS:
        finding = st.fixed_dictionaries(
            {
                "check": small_text,
                "severity": st.sampled_from(["info", "error"]),
                "message": small_text,
            },
            optional={"step": st.integers(-1, 9), "details": json_values, "param": small_text},
        )
        return Record(kind, {"findings": draw(st.lists(finding, max_size=2))})
    return Record(kind, {"phase": "fast", "seed": draw(json_values)})


@FIXTURE_OK
@given(batch=st.lists(plausible_records(), min_size=1, max_size=5))
def test_any_frames_the_server_accepts_can_be_read_by_every_read_route(
    client: TestClient, batch: list[Record]
) -> None:
    run = f"q-{uuid.uuid4().hex}"
    body = b"".join(encode_frame(seq, rec) for seq, rec in enumerate(batch, start=1))
    reply = client.post("/api/v1/ingest", content=body, headers=f.headers(run))
    assert reply.status_code in (200, 422), reply.text
    if reply.status_code != 200:
        return
    tensors = [
        str(t.get("name"))
        for rec in batch
        if rec.kind == Kind.RUN_START and isinstance(rec.meta.get("tensors"), list)
        for t in rec.meta["tensors"]
        if isinstance(t, dict)
    ]
    for path, params in f.read_requests(run, tensors):
        got = client.get(path, params=params)
        assert got.status_code < 500, (path, params, got.text[:300])
    group = client.get(f"/api/v1/runs/{run}").json().get("group")
    if group:
        for path in (f"/api/v1/groups/{group}", f"/api/v1/groups/{group}/envelope"):
            assert client.get(path).status_code < 500, path
