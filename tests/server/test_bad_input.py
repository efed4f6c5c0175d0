"""Bad and extreme input at the ingest edge: names, empty and maximal batches.

Names (project, run name, tags, tensor names) with unicode, quotes, SQL metacharacters,
format strings and NUL are data: stored and served back verbatim, or refused with a 4xx
that stores nothing; never a 5xx. An empty batch is a 400; a batch at the collector's
limits (``MAX_BATCH_FRAMES`` frames) is stored whole, and replaying it changes nothing.
"""

from __future__ import annotations

import uuid

import numpy as np
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradwatch.core.wire import Kind, Record
from gradwatch.transport.sender import MAX_BATCH_BYTES, MAX_BATCH_FRAMES
from tests.server import frames as f

NASTY = [
    "'; DROP TABLE runs; --",
    'a"b\\c',
    "%s %d {0} ${x}",
    "\x00nul",
    "ünï\u200bcødé 🧪",
    "Robert'); DELETE FROM tokens;--",
    " ",
    "x" * 256,
]
names = st.sampled_from(NASTY) | st.text(min_size=1, max_size=40)


def count_runs(client: TestClient) -> int:
    count: int = client.get("/api/v1/runs").json()["count"]
    return count


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    project=names,
    name=names,
    tags=st.lists(names, max_size=3),
    tensors=st.lists(names, min_size=1, max_size=3, unique=True),
)
def test_names_are_data_stored_verbatim_or_refused_cleanly(
    client: TestClient, project: str, name: str, tags: list[str], tensors: list[str]
) -> None:
    run = f"n-{uuid.uuid4().hex}"
    before = count_runs(client)
    stats = np.ones((3, len(tensors), 4), dtype=np.float32)
    records = [f.start(run, project, tensors, name=name, tags=tags), f.steps(1, stats)]
    reply = client.post(
        "/api/v1/ingest", content=b"".join(f.frames(records)), headers=f.headers(run)
    )
    assert reply.status_code < 500, reply.text
    if reply.status_code != 200:
        assert reply.json()["detail"] and count_runs(client) == before
        return
    got = client.get(f"/api/v1/runs/{run}").json()
    assert (got["project"], got["name"]) == (project, name)
    assert sorted(got["tags"]) == sorted(set(tags))
    assert [t["name"] for t in got["start"]["tensors"]] == tensors
    queryable = [t for t in tensors if "\x00" not in t]  # a NUL in a URL is refused (400)
    reply = client.get(f"/api/v1/runs/{run}/series", params=[("tensor", t) for t in queryable])
    assert reply.status_code == 200, reply.text
    assert sorted(s["name"] for s in reply.json()["data"]) == sorted(queryable)


def test_an_empty_batch_is_refused(client: TestClient) -> None:
    reply = client.post("/api/v1/ingest", content=b"", headers=f.headers("empty"))
    assert reply.status_code == 400 and "empty body" in reply.json()["detail"]
    assert count_runs(client) == 0


def test_a_maximal_batch_is_stored_whole_and_a_replay_changes_nothing(client: TestClient) -> None:
    records = [f.start("big", "p", ["w"])]
    records += [Record(Kind.HEARTBEAT, {"t": 1.7e9 + i, "steps": [i]}) for i in range(1, 1000)]
    stats = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
    records += [f.steps(i, stats) for i in range(1, MAX_BATCH_FRAMES - 999)]
    frames = f.frames(records)
    body = b"".join(frames)
    assert len(frames) == MAX_BATCH_FRAMES and len(body) <= MAX_BATCH_BYTES
    first = client.post("/api/v1/ingest", content=body, headers=f.headers("big"))
    assert first.status_code == 200, first.text
    assert first.json() == {"run": "big", "accepted": MAX_BATCH_FRAMES, "duplicates": 0}
    detail = client.get("/api/v1/runs/big").json()
    again = client.post("/api/v1/ingest", content=body, headers=f.headers("big"))
    assert again.json() == {"run": "big", "accepted": 0, "duplicates": MAX_BATCH_FRAMES}
    assert client.get("/api/v1/runs/big").json() | {"last_seen": None} == detail | {
        "last_seen": None
    }
    series = client.get("/api/v1/runs/big/series", params={"tensor": "w", "points": 5000}).json()
    assert series["data"][0]["steps"] == list(range(1, MAX_BATCH_FRAMES - 999))
