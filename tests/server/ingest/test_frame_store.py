"""Ingest over HTTP (TestClient): storing, deduplicating and refusing bad input clearly."""

from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from gradwatch.core.nonfinite import from_jsonable
from gradwatch.core.wire import Array, Kind, Record, encode_frame
from gradwatch_server.app import create_app
from gradwatch_server.ingest.batch_writer import IngestJob
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import LOCAL


def post(client: TestClient, run: str, body: bytes, **hdrs: str) -> tuple[int, dict[str, object]]:
    reply = client.post("/api/v1/ingest", content=body, headers=f.headers(run, **hdrs))
    return reply.status_code, reply.json()


def test_a_run_is_stored_and_listed(client: TestClient) -> None:
    status, body = post(client, "r1", b"".join(f.simple_run("r1", n=10)))
    assert (status, body) == (200, {"run": "r1", "accepted": 5, "duplicates": 0})
    runs = client.get("/api/v1/runs").json()
    assert runs["count"] == 1
    run = runs["data"][0]
    assert (run["id"], run["status"], run["steps"], run["frames"]) == ("r1", "finished", 10, 5)
    assert run["config_hash"] == "cfg1"


def test_a_replayed_batch_counts_as_duplicates_and_changes_nothing(client: TestClient) -> None:
    body = b"".join(f.simple_run("r1"))
    post(client, "r1", body)
    before = client.get("/api/v1/runs/r1/series", params={"tensor": "t0"}).json()
    assert post(client, "r1", body) == (200, {"run": "r1", "accepted": 0, "duplicates": 5})
    assert client.get("/api/v1/runs/r1/series", params={"tensor": "t0"}).json() == before
    assert client.get("/api/v1/runs/r1").json()["frames"] == 5


def test_steps_before_run_start_still_land_in_the_right_project(client: TestClient) -> None:
    records = f.frames([f.start("r1", "vision"), f.steps(1, np.ones((3, 2, 4), "f4"))])
    assert post(client, "r1", records[1])[0] == 200
    assert client.get("/api/v1/runs/r1").json()["project"] == "default"
    assert post(client, "r1", records[0])[0] == 200
    run = client.get("/api/v1/runs/r1").json()
    assert (run["project"], run["steps"]) == ("vision", 3)


@pytest.mark.parametrize(
    ("hdrs", "fragment"),
    [
        ({"X-Gradwatch-Schema": "2"}, "speaks gradwatch wire schema 1"),
        ({"X-Gradwatch-Run": "../etc"}, "bad run id"),
        ({"X-Gradwatch-Run": ""}, "missing X-Gradwatch-Run"),
        ({"Content-Type": "application/json"}, "content type"),
    ],
)
def test_bad_headers_are_4xx_with_a_message(
    client: TestClient, hdrs: dict[str, str], fragment: str
) -> None:
    status, body = post(client, "r1", b"".join(f.simple_run("r1")), **hdrs)
    assert 400 <= status < 500
    assert fragment in str(body["detail"])
    assert client.get("/api/v1/runs").json()["count"] == 0


def test_damaged_frames_are_refused_and_nothing_is_stored(client: TestClient) -> None:
    good = f.simple_run("r1")
    damaged = bytearray(good[2])
    damaged[-1] ^= 0xFF
    status, body = post(client, "r1", good[0] + good[1] + bytes(damaged))
    assert status == 400
    assert f"byte {len(good[0]) + len(good[1])} is damaged" in str(body["detail"])
    status, body = post(client, "r1", good[0] + good[1][:-3])
    assert (status, "incomplete" in str(body["detail"])) == (400, True)
    assert client.get("/api/v1/runs").json()["count"] == 0


def test_a_frame_of_another_schema_version_is_named(client: TestClient) -> None:
    frame = bytearray(f.simple_run("r1")[0])
    frame[2] = 7
    status, body = post(client, "r1", bytes(frame))
    assert status == 400
    assert "schema version 7" in str(body["detail"])


@pytest.mark.parametrize(
    ("record", "fragment"),
    [
        (Record(Kind.RUN_START, {"project": 5}), "meta.project must be a string"),
        (Record(Kind.RUN_START, {"name": "a\x00b"}), "NUL"),
        (Record(Kind.RUN_START, {"run": "other"}), "X-Gradwatch-Run header says"),
        (Record(Kind.RUN_START, {"started_at": float("nan")}), "must be finite"),
        (Record(Kind.END, {"steps": "many"}), "meta.steps must be a list"),
        (Record(Kind.FINDINGS, {"findings": [{"check": "x", "severity": "fatal"}]}), "severity"),
        (Record(Kind.STEPS, {"optimizer": 0}), "1-d integer array of step numbers"),
        (
            Record(
                Kind.STEPS,
                {"optimizer": 0, "stats": ["a"]},
                {
                    "step": Array.from_values("i8", [1, 2]),
                    "stats": Array.from_values("f4", [1.0, 2.0, 3.0], (3, 1, 1)),
                },
            ),
            "expected (2, tensors, 1)",
        ),
    ],
)
def test_malformed_records_are_422_naming_frame_and_field(
    client: TestClient, record: Record, fragment: str
) -> None:
    body = f.simple_run("r1")[0] + encode_frame(9, record)
    status, reply = post(client, "r1", body)
    assert status == 422
    assert "frame seq 9" in str(reply["detail"]) and fragment in str(reply["detail"])
    assert client.get("/api/v1/runs").json()["count"] == 0


def test_a_seq_beyond_int64_is_refused(client: TestClient) -> None:
    frame = encode_frame((1 << 63) + 5, Record(Kind.HEARTBEAT, {}))
    status, reply = post(client, "r1", frame)
    assert status == 422 and "seq" in str(reply["detail"])


def test_an_oversized_body_is_413(settings: Settings) -> None:
    with TestClient(create_app(settings.with_(max_body_bytes=1000)), base_url=LOCAL) as client:
        status, reply = post(client, "r1", b"G" * 1001)
        assert status == 413 and "limit" in str(reply["detail"])
        assert post(client, "r1", f.simple_run("r1", n=2)[0])[0] == 200


def test_findings_are_stored_and_counted(client: TestClient) -> None:
    finding = {
        "check": "nonfinite-grad",
        "severity": "error",
        "step": 3,
        "optimizer": 0,
        "param": "t1",
        "message": "NaN in t1",
        "hint": "lower the learning rate",
        "details": {"count": 2, "first": float("nan"), "said": "NaN"},
        "t": 1.5,
        "source": "runtime",
    }
    record = Record(Kind.FINDINGS, {"findings": [finding, {**finding, "severity": "info"}]})
    post(client, "r1", b"".join(f.simple_run("r1")) + encode_frame(6, record))
    listed = client.get("/api/v1/runs").json()["data"][0]
    assert listed["findings"] == {"info": 1, "warning": 0, "error": 1}
    found = client.get("/api/v1/runs/r1/findings", params={"severity": "error"}).json()
    assert found["count"] == 1
    # NaN and the string "NaN" stay distinct in free-form details
    assert found["data"][0]["details"] == {"count": 2, "first": {"$f": "nan"}, "said": "NaN"}
    assert found["data"][0]["param"] == "t1"


def test_nan_and_the_string_nan_differ_in_start_end_and_fingerprint(client: TestClient) -> None:
    both = {"x": float("nan"), "y": "NaN", "z": [float("-inf"), "-Infinity"]}
    tagged = {"x": {"$f": "nan"}, "y": "NaN", "z": [{"$f": "-inf"}, "-Infinity"]}
    records = [
        f.start("r1", options=both),
        Record(Kind.FINGERPRINT, {"phase": "fast", **both}),
        Record(Kind.END, {"status": "finished", "ended_at": 1.7e9, "steps": [0], "e": both}),
    ]
    post(client, "r1", b"".join(f.frames(records)))
    run = client.get("/api/v1/runs/r1").json()
    assert run["start"]["options"] == tagged
    assert {k: run["fingerprint"][k] for k in both} == tagged
    assert run["end"]["e"] == tagged
    assert from_jsonable(run["start"]["options"])["y"] == "NaN"


def test_user_scalars_come_back_per_key(client: TestClient) -> None:
    record = Record(
        Kind.SCALARS,
        {"keys": ["acc", "lr"]},
        {
            "step": Array.from_values("i8", [1, 1, 2]),
            "key": Array.from_values("i4", [0, 1, 0]),
            "value": Array.from_buffer("f8", (3,), struct.pack("<3d", 0.5, 1e-3, float("inf"))),
        },
    )
    post(client, "r1", f.simple_run("r1")[0] + encode_frame(7, record))
    got = client.get("/api/v1/runs/r1/series", params={"scalar": "acc", "tensor": []}).json()
    assert got["data"][0]["steps"] == [1, 2]
    assert got["data"][0]["values"] == [0.5, "Infinity"]


@pytest.mark.parametrize(
    "url",
    ["/api/v1/runs/a%00b", "/api/v1/runs?project=x%00", "/api/v1/runs/r1/series?stat=a%00"],
)
def test_a_nul_in_the_url_is_400(client: TestClient, url: str) -> None:
    reply = client.get(url)
    assert reply.status_code == 400 and "NUL" in reply.json()["detail"]


def test_a_full_ingest_backlog_is_503_with_retry_after_and_stores_nothing(
    settings: Settings,
) -> None:
    app = create_app(settings.with_(ingest_backlog_bytes=1000))
    gate = threading.Event()

    def held() -> list[object]:
        gate.wait(30)
        return []

    with TestClient(app, base_url=LOCAL) as client:
        writer = app.state.ingest_writer
        busy = writer.submit(IngestJob("held", 10, prepare=held, store=lambda s, p: None))
        deadline = time.monotonic() + 10
        while writer.backlog() and time.monotonic() < deadline:  # the thread took it
            time.sleep(0.01)
        queued = writer.submit(IngestJob("queued", 5000, prepare=list, store=lambda s, p: None))
        assert writer.backlog() == 5000
        reply = client.post(
            "/api/v1/ingest", content=b"".join(f.simple_run("r1")), headers=f.headers("r1")
        )
        assert reply.status_code == 503
        assert 1 <= int(reply.headers["Retry-After"]) <= 30
        assert "retry in" in reply.json()["detail"]
        gate.set()
        busy.result(timeout=10), queued.result(timeout=10)
        assert client.get("/api/v1/runs").json()["count"] == 0
        assert post(client, "r1", b"".join(f.simple_run("r1")))[0] == 200


def test_the_fast_path_keeps_the_token_check_first(settings: Settings) -> None:
    with TestClient(create_app(settings.with_(require_tokens=True)), base_url=LOCAL) as client:
        reply = client.post("/api/v1/ingest", content=b"x", headers={"X-Gradwatch-Run": ""})
        assert reply.status_code == 401
        assert "requires an API token" in reply.json()["detail"]
