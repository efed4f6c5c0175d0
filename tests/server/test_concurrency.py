"""8 concurrent runs ingesting through real HTTP: 0 errors on SQLite and on PostgreSQL.

Each run is a thread with its own keep-alive connection, posting batches of frames as the
collector's sender does (run start, windows of steps of 40 tensors, heartbeats, end). Any
reply but 200 is an error, a 503 for "database is locked" included; afterwards every run
holds all of its frames and steps.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
from sqlalchemy import text

from gradwatch.core.wire import Kind, Record
from gradwatch.transport.sender import INGEST_PATH, HTTPTransport
from gradwatch_server.db import make_engine
from gradwatch_server.settings import Settings
from tests.server import frames as f
from tests.server.live import live_server

RUNS, BATCHES, STEPS, TENSORS = 8, 12, 25, 40


def run_batches(run: str) -> list[bytes]:
    """A run's frames, grouped into BATCHES request bodies."""
    rng = np.random.default_rng(abs(hash(run)) % 10_000)
    names = [f"layer{i}.weight" for i in range(TENSORS)]
    records = [f.start(run, "concurrency", names)]
    for b in range(BATCHES):
        stats = rng.random((STEPS, TENSORS, 4), dtype=np.float32)
        records += [f.steps(1 + b * STEPS, stats), Record(Kind.HEARTBEAT, {"t": 1.7e9 + b})]
    records.append(f.end(steps_done=BATCHES * STEPS))
    frames = f.frames(records)
    cut = [round(i * len(frames) / BATCHES) for i in range(BATCHES + 1)]
    return [b"".join(frames[a:z]) for a, z in itertools.pairwise(cut)]


def test_eight_concurrent_runs_through_http_get_no_errors(settings: Settings) -> None:
    bodies = {f"conc-{i}": run_batches(f"conc-{i}") for i in range(RUNS)}
    errors: list[str] = []
    barrier = threading.Barrier(RUNS)

    def send(base: str, run: str) -> None:
        transport = HTTPTransport(base)
        barrier.wait()
        try:
            for body in bodies[run]:
                reply = transport.post(INGEST_PATH, body, f.headers(run), 60)
                if reply.status != 200:
                    errors.append(f"{run}: HTTP {reply.status} {reply.body[:200]!r}")
        except OSError as e:
            errors.append(f"{run}: {e!r}")
        finally:
            transport.close()

    with live_server(settings) as base:
        began = time.monotonic()
        threads = [threading.Thread(target=send, args=(base, run)) for run in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        took = time.monotonic() - began
    assert errors == []
    engine = make_engine(settings.db_url)
    with engine.connect() as conn:
        frames = dict(
            conn.execute(text("SELECT run_id, count(*) FROM ingested_frames GROUP BY run_id")).all()
        )
        steps = dict(conn.execute(text("SELECT id, steps FROM runs")).all())
    engine.dispose()
    assert frames == {run: 2 + 2 * BATCHES for run in bodies}
    assert steps == {run: BATCHES * STEPS for run in bodies}
    values = RUNS * BATCHES * STEPS * TENSORS * 4
    print(f"{settings.db_url.split(':')[0]}: {values} values from {RUNS} runs in {took:.2f} s")
